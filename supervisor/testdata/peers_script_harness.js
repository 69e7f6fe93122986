// Runs assets/peers.js (argv[2]) against a small fake DOM and a scripted fetch, then prints each
// section's final state and links as JSON. Timers are fired by hand, after every answer that
// comes has come: the 2 s limit is a step, not a wait.
"use strict";
const fs = require("fs");
const vm = require("vm");

function el(tag, attrs) {
  const e = { tag, attrs: Object.assign({}, attrs || {}), children: [], text: "", className: "", href: "", hidden: false };
  e.getAttribute = (n) => (n in e.attrs ? e.attrs[n] : null);
  e.setAttribute = (n, v) => { e.attrs[n] = String(v); };
  e.appendChild = (c) => { if (c.parent) c.parent.children = c.parent.children.filter((x) => x !== c); c.parent = e; e.children.push(c); return c; };
  e.append = (...cs) => cs.forEach((c) => (typeof c === "string" ? null : e.appendChild(c)));
  e.querySelector = (sel) => e.children.find((c) => (sel === "ul" ? c.tag === "ul" : c.className === sel.slice(1))) || null;
  Object.defineProperty(e, "textContent", { get: () => e.text, set: (v) => { e.text = v; } });
  return e;
}

const origins = JSON.parse(process.argv[3]);
const answers = JSON.parse(process.argv[4]); // origin → {status, reason, body} | "hang" | "fail"
const sections = origins.map((o) => {
  const s = el("section", { "data-origin": o, "data-state": "loading" });
  const state = el("span"); state.className = "state";
  s.appendChild(state); s.appendChild(el("ul"));
  return s;
});
const noAnswer = el("details"); noAnswer.hidden = true;
const document = {
  querySelectorAll: () => sections,
  getElementById: (id) => (id === "no-answer" ? noAnswer : null),
  createElement: (tag) => el(tag),
};
const timers = [];
const asked = [];
function fetch(url, opts) {
  asked.push({ url, credentials: opts.credentials, accept: opts.headers.Accept, mode: opts.mode });
  const a = answers[url.replace(/\/$/, "")];
  return new Promise((resolve, reject) => {
    opts.signal.addEventListener("abort", () => reject(new Error("aborted")));
    if (a === "hang") return;
    if (a === "fail" || a === undefined) return reject(new TypeError("Failed to fetch"));
    resolve({
      ok: a.status >= 200 && a.status < 300,
      status: a.status,
      headers: { get: (n) => (n === "X-Fleet-Reason" ? a.reason || null : null) },
      json: () => Promise.resolve(a.body),
    });
  });
}
const ctx = { document, fetch, AbortController, Array, setTimeout: (f) => { timers.push(f); return timers.length; }, clearTimeout: () => {} };
vm.runInNewContext(fs.readFileSync(process.argv[2], "utf8"), ctx);
setImmediate(() => {
  timers.forEach((f) => f()); // the 2 s limit, reached
  setImmediate(() => {
    const out = sections.map((s) => ({
      origin: s.attrs["data-origin"],
      state: s.attrs["data-state"],
      label: s.querySelector(".state").text,
      collapsed: s.parent === noAnswer,
      links: s.querySelector("ul").children.map((li) => {
        const a = li.children.find((c) => c.tag === "a");
        return { cls: a.className, id: a.attrs["data-console-id"], href: a.href, name: a.text };
      }),
    }));
    console.log(JSON.stringify({ sections: out, asked, noAnswerShown: !noAnswer.hidden }));
  });
});
