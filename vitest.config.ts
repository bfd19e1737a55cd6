import { defineConfig } from "vitest/config";

// Tests start real server processes; run files in parallel forks but give each
// enough time for a server start, a few thousand HTTP requests and a restart.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    pool: "forks",
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
