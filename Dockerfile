# Eventide in a container: one process, two listeners, data on the /data volume.
#   docker build -t eventide .
#   docker run -p 8080:8080 -p 8081:8081 -v eventide-data:/data eventide
# The first start prints the default workspace's credentials once (docker logs).

# ---- build: every dependency (TypeScript compiles in `prepare`), then only the runtime ones are kept ----
FROM node:20-bookworm-slim AS build
# roaring's native addon is built from source when no prebuilt binary fits.
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json tsconfig.json tsconfig.client.json ./
COPY bin ./bin
COPY scripts ./scripts
COPY src ./src
COPY test ./test
COPY bench ./bench
RUN npm ci
RUN npm prune --omit=dev

# ---- runtime: compiled JavaScript and production modules, no compiler, non-root ----
FROM node:20-bookworm-slim AS runtime
ENV NODE_ENV=production \
    EVENTIDE_DATA_DIR=/data \
    EVENTIDE_HOST=0.0.0.0 \
    EVENTIDE_QUERY_PORT=8080 \
    EVENTIDE_INGEST_PORT=8081
WORKDIR /app
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/bin ./bin
COPY --from=build /app/dist/src ./dist/src
COPY --from=build /app/src/dashboard ./src/dashboard
RUN mkdir -p /data && chown node:node /data
USER node
VOLUME ["/data"]
EXPOSE 8080 8081
# No curl in slim images: node asks /ready on the query listener.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.EVENTIDE_QUERY_PORT||8080)+'/ready').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# SIGTERM from `docker stop` reaches node directly (exec form): it seals, fsyncs and exits 0 within 10 s.
STOPSIGNAL SIGTERM
CMD ["node", "--initial-heap-size=128", "--expose-gc", "dist/src/main.js"]
