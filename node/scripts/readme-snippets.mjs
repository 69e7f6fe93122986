// Writes every fenced code block of README.md whose language is js, cjs or ts into a folder, as
// snippet-N.mjs, snippet-N.cjs or snippet-N.ts, and prints their names, one a line, so that CI can
// run (js, cjs) or type-check (ts) each one as written.
//
//   node scripts/readme-snippets.mjs README.md OUTDIR

import fs from "node:fs";
import path from "node:path";

const [readme, out] = process.argv.slice(2);
if (!readme || !out) {
  process.stderr.write("usage: node scripts/readme-snippets.mjs README.md OUTDIR\n");
  process.exit(2);
}
const ext = { js: "mjs", mjs: "mjs", cjs: "cjs", ts: "ts" };
const text = fs.readFileSync(readme, "utf8");
const fence = /^```([a-z]*)\n([\s\S]*?)^```$/gm;
fs.mkdirSync(out, { recursive: true });
let n = 0;
for (const m of text.matchAll(fence)) {
  const e = ext[m[1]];
  if (!e) continue;
  const name = `snippet-${++n}.${e}`;
  fs.writeFileSync(path.join(out, name), m[2]);
  process.stdout.write(name + "\n");
}
if (n === 0) {
  process.stderr.write(`${readme}: no js, cjs or ts code block\n`);
  process.exit(1);
}
