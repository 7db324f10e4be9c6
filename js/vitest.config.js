import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    environment: "jsdom",
    include: ["test/**/*.test.js"],
    // The widget modules live in ../widgets; let vite read them.
    server: { fs: { allow: [".."] } },
  },
});
