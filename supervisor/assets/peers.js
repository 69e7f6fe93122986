// fleet's index: each section.peer names another machine's fleet (its data-origin). This script
// asks each of them, at once and in parallel, for the consoles *that machine* lets the person
// looking open (SPEC G2): GET / for JSON, no credentials — the tailnet tells each machine who
// is asking. An answer fills its section as it comes; a fleet that refuses says so ("refused");
// anything that is not a fleet's answer within 2 s is "no answer", collapsed at the end.
"use strict";
(function () {
  var timeoutMs = 2000;
  var consoleID = /^[a-z0-9][a-z0-9-]{0,62}$/;
  var healths = { up: true, down: true, unknown: true };

  function setState(section, state, text) {
    section.setAttribute("data-state", state);
    var label = section.querySelector(".state");
    if (label) label.textContent = text;
  }

  function noAnswer(section) {
    setState(section, "no-answer", "no answer");
    var box = document.getElementById("no-answer");
    if (box) {
      box.hidden = false;
      box.appendChild(section);
    }
  }

  // fill lists the consoles of a fleet's answer, each linked through that machine's own name;
  // false when the answer is not a fleet's.
  function fill(section, origin, body) {
    if (!body || !Array.isArray(body.consoles)) return false;
    var list = section.querySelector("ul");
    body.consoles.forEach(function (c) {
      if (!c || typeof c.id !== "string" || !consoleID.test(c.id)) return;
      var li = document.createElement("li");
      var a = document.createElement("a");
      a.className = "console";
      a.setAttribute("data-console-id", c.id);
      a.href = origin + "/c/" + c.id + "/";
      a.textContent = typeof c.name === "string" && c.name !== "" ? c.name : c.id;
      var small = document.createElement("small");
      small.textContent = c.id;
      var health = document.createElement("span");
      health.className = healths[c.health] ? c.health : "unknown";
      health.textContent = health.className;
      li.append(a, " ", small, " ", health);
      list.appendChild(li);
    });
    setState(section, "answered", list.children.length ? "" : "no console here that you may open");
    return true;
  }

  function ask(section) {
    var origin = section.getAttribute("data-origin");
    var ctl = new AbortController();
    var timer = setTimeout(function () { ctl.abort(); }, timeoutMs);
    fetch(origin + "/", {
      headers: { Accept: "application/json" },
      credentials: "omit",
      mode: "cors",
      cache: "no-store",
      redirect: "error",
      referrerPolicy: "no-referrer",
      signal: ctl.signal
    }).then(function (res) {
      var reason = res.headers.get("X-Fleet-Reason");
      if (!res.ok) {
        clearTimeout(timer);
        if (reason) setState(section, "refused", "refused (" + reason + ")");
        else noAnswer(section);
        return;
      }
      return res.json().then(function (body) {
        clearTimeout(timer);
        if (!fill(section, origin, body)) noAnswer(section);
      });
    }).catch(function () {
      clearTimeout(timer);
      noAnswer(section);
    });
  }

  document.querySelectorAll("section.peer[data-origin]").forEach(ask);
})();
