-- Checkpoint commits pushed to listeners (read-your-writes waiters) instead of each
-- waiter polling the table.
    create function projection_checkpoint_notify() returns trigger language plpgsql as $fn$
    begin
      perform pg_notify('projection_checkpoints', new.name || ' ' || new.commit_position::text || '-' || new.prepare_position::text);
      return null;
    end
    $fn$;
    create trigger projection_checkpoints_notify after insert or update on projection_checkpoints
      for each row execute function projection_checkpoint_notify();
