/** The parts of an OpenAPI 3.1 document the fuzz test reads, and the requests it builds. */
export type Schema = {
  $ref?: string;
  type?: string | string[];
  format?: string;
  pattern?: string;
  enum?: unknown[];
  const?: unknown;
  minimum?: number;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
  anyOf?: Schema[];
  oneOf?: Schema[];
  allOf?: Schema[];
  default?: unknown;
};
type Security = Array<Record<string, unknown>>;
export type Parameter = { in: 'path' | 'query' | 'header' | 'cookie'; name: string; required?: boolean; schema?: Schema };
export type Operation = {
  parameters?: Parameter[];
  requestBody?: { required?: boolean; content?: Record<string, { schema?: Schema }> };
  responses?: Record<string, unknown>;
  security?: Security;
};
export type OpenApiDocument = {
  paths: Record<string, Record<string, Operation>>;
  components?: { schemas?: Record<string, Schema>; securitySchemes?: Record<string, { type?: string; in?: string; name?: string }> };
  security?: Security;
};

export type Op = {
  readonly method: string;
  readonly path: string;
  readonly operation: Operation;
  readonly documented: ReadonlySet<number>;
};

/** A field of a request: where it lives and how to reach it. */
export type Field =
  | { readonly in: 'path' | 'query' | 'header'; readonly name: string; readonly schema: Schema }
  | { readonly in: 'body'; readonly path: readonly (string | number)[]; readonly schema: Schema };

export type RequestSpec = {
  pathParams: Record<string, string>;
  /** Raw query pairs, already percent-encoded (hostile encodings included). */
  query: Array<[string, string]>;
  headers: Record<string, string>;
  /** A JSON value, or raw text sent as is. */
  body: { kind: 'json'; value: unknown } | { kind: 'raw'; text: string; contentType: string } | undefined;
};
