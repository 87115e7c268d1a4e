/**
 * The state-stored CRUD baseline of the `write` bench: what a team would write
 * without event sourcing. Fastify + pg, the same create as `POST /v1/employees` (zod-validated
 * body, a ULID, 201 + Location + body) as ONE `INSERT` into a table with a unique index on
 * (tenant, lower(email)); a duplicate is a 409. No auth, no rate limit, no log: the fastest
 * honest version of the create, so our ratio against it is conservative.
 *
 *   DATABASE_URL=… PORT=… node bench/support/crudServer.ts
 */
import Fastify from 'fastify';
import pg from 'pg';
import { monotonicFactory } from 'ulid';
import { z } from 'zod';

const body = z.object({
  email: z.email().max(254),
  firstName: z.string().min(1).max(100),
  lastName: z.string().min(1).max(100),
  department: z.string().max(100).optional(),
});

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: Number(process.env.CRUD_POOL_SIZE ?? 10) });
await pool.query(`
  create table if not exists crud_employees (
    tenant_id uuid not null, id text not null, email text not null, first_name text not null, last_name text not null,
    department text, status text not null, hired_at timestamptz not null, primary key (tenant_id, id)
  );
  create unique index if not exists crud_employees_email on crud_employees (tenant_id, lower(email));
`);
const tenantId = '00000000-0000-4000-8000-000000000001';
const nextId = monotonicFactory();
const app = Fastify({ logger: false });
app.post('/v1/employees', async (request, reply) => {
  const parsed = body.safeParse(request.body);
  if (!parsed.success) return reply.code(400).send({ title: 'Bad Request' });
  const { email, firstName, lastName, department } = parsed.data;
  const id = nextId();
  const hiredAt = new Date().toISOString();
  try {
    await pool.query(
      `insert into crud_employees (tenant_id, id, email, first_name, last_name, department, status, hired_at) values ($1, $2, $3, $4, $5, $6, 'active', $7)`,
      [tenantId, id, email, firstName, lastName, department ?? null, hiredAt],
    );
  } catch (error) {
    if ((error as { code?: string }).code === '23505') return reply.code(409).send({ title: 'Conflict' });
    throw error;
  }
  return reply
    .code(201)
    .header('location', `/v1/employees/${id}`)
    .send({ id, email, firstName, lastName, department: department ?? null, status: 'active', hiredAt });
});
app.get('/health/ready', async () => ({ status: 'ok' }));
await app.listen({ port: Number(process.env.PORT ?? 3100), host: '127.0.0.1' });
const stop = async () => {
  await app.close();
  await pool.end();
  process.exit(0);
};
process.on('SIGTERM', () => void stop());
process.on('SIGINT', () => void stop());
