-- es_streams goes, in a migration of its own after 010 committed, so that flushes
-- running the new functions never queue behind the drop.
drop table es_streams;
