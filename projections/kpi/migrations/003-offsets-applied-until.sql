-- The usage watermark (KPI asOf): per partition, the newest sample applied.
alter table kpi_kafka_offsets add column applied_until timestamptz;
