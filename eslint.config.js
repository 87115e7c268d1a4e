import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import { createNodeResolver, importX } from 'eslint-plugin-import-x';

/**
 * The floors: shared/ (adapters) below projections/ (read models) below services/ (gateway,
 * write side, composition root). An import may point down, never up; the read side takes from
 * services/ only a capability's published contract (services/<capability>/contract.ts); no
 * production folder imports test, bench or script code. docs/decisions/005-import-floors.md.
 *
 * import-x resolves each import (static, `export … from` and dynamic `import()`) to its file
 * before it compares folders, so the spelling of a path cannot slip past the rule.
 */
const noTestCode = ['test', 'bench', 'scripts'].map((folder) => ({
  target: ['./services', './projections', './shared'],
  from: `./${folder}`,
  message: `production code (services/, projections/, shared/) must not import ${folder}/: it is not deployed.`,
}));

const floors = [
  ...['services', 'projections'].map((folder) => ({
    target: './shared',
    from: `./${folder}`,
    message: `shared/ is the lowest floor: it must not import ${folder}/ (move the code down, or pass it in).`,
  })),
  {
    target: './projections',
    from: './services/**/*',
    // Glob exceptions are matched against the resolved, absolute path.
    except: [`${import.meta.dirname}/services/*/contract.ts`],
    message: "projections/ may import from services/ only a capability's contract (services/<capability>/contract.ts).",
  },
  {
    // The gateway is the plumbing every capability plugs into: what it needs from one (the bearer
    // scheme's description) the composition root passes in, so no capability is a floor under it.
    target: './services/gateway',
    from: './services/**/*',
    except: [`${import.meta.dirname}/services/gateway/**`],
    message: 'services/gateway/ must not import a capability: take what it needs as an option from the composition root.',
  },
  ...noTestCode,
];

export default tseslint.config(
  {
    ignores: [
      'node_modules/',
      '.data/',
      '.tmp/',
      '.kafka/',
      'reports/',
      'bench/results/',
      'bench/.*',
      'clients/typescript/dist/',
      'test/clients/consumer/',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      'no-constant-condition': ['error', { checkLoops: false }],
    },
  },
  {
    files: ['**/*.{ts,mts,cts,js,mjs,cjs}'],
    plugins: { 'import-x': importX },
    settings: { 'import-x/resolver-next': [createNodeResolver()] },
    rules: {
      // Zones are relative to this file, not to wherever ESLint was started from.
      'import-x/no-restricted-paths': ['error', { basePath: import.meta.dirname, zones: floors }],
      // An import the resolver cannot find would pass the floors unchecked: refuse it here.
      'import-x/no-unresolved': 'error',
    },
  },
  {
    // NodeNext type-checks a `.js` spelling of a `.ts` file, which no resolver finds, and
    // no-unresolved skips type-only imports: one spelling, `.ts`, keeps the floors checked.
    files: ['**/*.{ts,mts,cts}'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { regex: '^\\.\\.?/.*\\.js$', message: 'import a TypeScript file by its own name (.ts), so the import floors can check it.' },
          ],
        },
      ],
    },
  },
  {
    // A zod schema is built once, at module level: building one per call, and zod compiling the
    // new instance's parser on its first row, costs more CPU than a small statement's round trip.
    files: ['services/**/*.ts', 'projections/**/*.ts', 'shared/**/*.ts'],
    rules: {
      'no-restricted-syntax': [
        'error',
        {
          selector: ":function CallExpression[callee.object.name='sql'][callee.property.name='type'] > CallExpression",
          message: 'build the row schema once, at module level (a const), and pass it by name; `ignoredRows` for rows nobody reads.',
        },
      ],
    },
  },
);
