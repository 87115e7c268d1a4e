import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/**
 * The floors: shared/ (adapters) below projections/ (read models) below services/ (gateway,
 * write side, composition root). An import may point down, never up; the read side takes from
 * services/ only a capability's published contract (services/<capability>/contract.ts); no
 * production folder imports test, bench or script code. docs/decisions/005-import-floors.md.
 *
 * `no-restricted-imports` matches the import text, not the resolved file, so a folder's rule is
 * written once per depth: from `shared/x/y.ts`, `../../services/…` leaves the repository root for
 * services/, while `../projections/…` stays in shared/projections/.
 */
const DEPTHS = [1, 2, 3, 4, 5, 6];

/** One `files` block per depth of `folder`, each forbidding imports of the root folders named in `forbidden`. */
function floor(folder, forbidden) {
  return DEPTHS.map((depth) => ({
    files: [`${folder}/${'*/'.repeat(depth - 1)}*.{ts,js}`],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: forbidden.map(({ to, except, message }) => ({
            regex: `^(\\.\\./){${depth}}${to}/${except ? `(?!${except}$)` : ''}`,
            message,
          })),
        },
      ],
    },
  }));
}

const noTestCode = ['test', 'bench', 'scripts'].map((to) => ({
  to,
  message: `production code (services/, projections/, shared/) must not import ${to}/: it is not deployed.`,
}));

export default tseslint.config(
  { ignores: ['node_modules/', '.data/', '.tmp/', '.kafka/', 'reports/', 'bench/results/', 'bench/.*'] },
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
  ...floor('shared', [
    { to: 'services', message: 'shared/ is the lowest floor: it must not import services/ (move the code down, or pass it in).' },
    { to: 'projections', message: 'shared/ is the lowest floor: it must not import projections/ (move the code down, or pass it in).' },
    ...noTestCode,
  ]),
  ...floor('projections', [
    {
      to: 'services',
      except: '[^/]+/contract\\.ts',
      message: "projections/ may import from services/ only a capability's contract (services/<capability>/contract.ts).",
    },
    ...noTestCode,
  ]),
  ...floor('services', noTestCode),
);
