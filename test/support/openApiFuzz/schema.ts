/* Reading the served document: schemas with their references resolved, and each operation's fields. */
import { z } from 'zod';
import { tenantSlugSchema } from '../../../services/tenants/tenants.ts';
import { doc } from './target.ts';
import type { Field, Op, Schema } from './types.ts';

/** `schema` with its references into the served document resolved (and a lone allOf or nullable union unwrapped). */
export function resolve(schema: Schema | undefined): Schema {
  let current = schema ?? {};
  for (let depth = 0; current.$ref && depth < 10; depth++) {
    const name = current.$ref.replace('#/components/schemas/', '');
    current = doc.components?.schemas?.[name] ?? {};
  }
  if (current.allOf?.length === 1 && current.allOf[0]) return resolve(current.allOf[0]);
  const alternatives = current.anyOf ?? current.oneOf;
  if (alternatives) {
    const first = alternatives.map(resolve).find((s) => s.type !== 'null');
    if (first) return first;
  }
  return current;
}

export const typeOf = (schema: Schema): string | undefined =>
  Array.isArray(schema.type) ? schema.type.find((t) => t !== 'null') : schema.type;

export const parametersOf = (op: Op) => (op.operation.parameters ?? []).filter((p) => p.in !== 'cookie');
export const bodySchemaOf = (op: Op): Schema | undefined => op.operation.requestBody?.content?.['application/json']?.schema;

/** X-Tenant as the `tenant` security scheme declares it (the slug schema the auth hook checks). */
export const TENANT_HEADER_SCHEMA = z.toJSONSchema(tenantSlugSchema) as Schema;

export const usesTenantScheme = (op: Op) => (op.operation.security ?? doc.security ?? []).some((requirement) => 'tenant' in requirement);

/** Every field of the operation, nested body fields included (arrays: their first element). */
export function fieldsOf(op: Op): Field[] {
  const fields: Field[] = parametersOf(op).flatMap((p) =>
    p.in === 'cookie' ? [] : [{ in: p.in, name: p.name, schema: resolve(p.schema) }],
  );
  if (usesTenantScheme(op) && !fields.some((f) => f.in === 'header' && f.name === 'x-tenant')) {
    fields.push({ in: 'header', name: 'x-tenant', schema: TENANT_HEADER_SCHEMA });
  }
  const walk = (schema0: Schema | undefined, path: (string | number)[], depth: number) => {
    const schema = resolve(schema0);
    if (path.length > 0) fields.push({ in: 'body', path, schema });
    if (depth > 4) return;
    if (typeOf(schema) === 'object')
      for (const [key, property] of Object.entries(schema.properties ?? {})) walk(property, [...path, key], depth + 1);
    if (typeOf(schema) === 'array') walk(schema.items, [...path, 0], depth + 1);
  };
  const body = bodySchemaOf(op);
  if (body) walk(body, [], 0);
  return fields;
}

export const fieldName = (field: Field) => (field.in === 'body' ? `body.${field.path.join('.')}` : `${field.in}.${field.name}`);
export const isStringField = (field: Field) =>
  typeOf(field.schema) === 'string' || (field.in !== 'body' && typeOf(field.schema) === undefined);
