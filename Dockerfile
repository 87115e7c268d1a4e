# syntax=docker/dockerfile:1.7
# One image for every role: `gateway`, `projector <name>`, `worker` (docker-compose.yml picks
# the role with `command:`). Node 24 runs the TypeScript sources itself (type stripping; the
# code is erasable-only, `erasableSyntaxOnly` in tsconfig), as with `npm start`: no build output
# to drift from the sources and no loader in the process.

ARG NODE_IMAGE=node:24-bookworm-slim

# --- production dependencies only (glibc: argon2 and the KurrentDB client's native bridge ship gnu prebuilds)
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
ENV npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
COPY package.json package-lock.json ./
RUN --mount=type=cache,target=/root/.npm npm ci --omit=dev

# --- all dependencies + typecheck: a broken tree never becomes an image
FROM ${NODE_IMAGE} AS check
WORKDIR /app
ENV npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
COPY package.json package-lock.json ./
RUN --mount=type=cache,target=/root/.npm npm ci
COPY tsconfig.json ./
COPY services ./services
COPY projections ./projections
COPY shared ./shared
COPY scripts ./scripts
COPY test ./test
COPY bench ./bench
COPY clients ./clients
COPY vitest.config.ts ./
RUN npx tsc --noEmit -p . && npx tsc -p services/dashboard/public && touch /app/.checked

# --- runtime
FROM ${NODE_IMAGE} AS runtime
WORKDIR /app
ENV NODE_ENV=production HOST=0.0.0.0 PORT=3000 DATA_DIR=/app/.data
# The typecheck stage must have passed for this stage to build.
COPY --from=check /app/.checked /tmp/.checked
COPY --from=deps --chown=node:node /app/node_modules ./node_modules
COPY --chown=node:node package.json tsconfig.json ./
COPY --chown=node:node services ./services
COPY --chown=node:node projections ./projections
COPY --chown=node:node shared ./shared
COPY --chown=node:node scripts ./scripts
RUN mkdir -p /app/.data && chown node:node /app/.data
USER node
EXPOSE 3000
# Every role serves /health/live on $PORT (the gateway with the API, the others alone).
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=5 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||3000)+'/health/live').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# Memory settings, the same as `npm start` (docs/benchmarks.md, "Runtime"; keep the two in step):
# - MALLOC_MMAP_THRESHOLD_: a fixed glibc mmap threshold. Left dynamic, glibc raises it to the
#   size of the first large block freed: argon2's 19 MiB work area then stays in the arena of
#   each libuv thread that hashed a password (up to 4 × 19 MiB). Fixed, large blocks are mapped
#   and unmapped each time.
ENV MALLOC_MMAP_THRESHOLD_=131072
# Plain `node`: no wrapper process or loader, so SIGTERM reaches the service's shutdown handler.
# --max-semi-space-size=16: the young generation Node ≤ 20 had; Node 24 grows it to 64 MB per
# semi-space on large hosts, which held ~130 MB more RSS under load.
# --heap-growing-percent=50: the old generation's next GC limit is 1.5 × what survived, not up to
# 4 × (V8's factor for a heap limit ≥ 2 GB). It sets no limit: unlike --max-old-space-size, a
# larger live set only means later GCs, never a crash.
ENTRYPOINT ["node", "--max-semi-space-size=16", "--heap-growing-percent=50", "services/main.ts"]
CMD ["all"]
