// The pairing link carries the code in its #fragment, which never reaches a server or a log.
// Move it into the form, then drop it from the address bar and the history.
(function () {
  "use strict";
  var h = window.location.hash;
  if (!h || h.length < 2) {
    return;
  }
  var code = "";
  try {
    code = decodeURIComponent(h.slice(1));
  } catch (e) {
    code = h.slice(1); // a stray % sign: keep the letters as they are
  }
  code = code.replace(/[^A-Za-z -]/g, "").slice(0, 32);
  if (window.history && window.history.replaceState) {
    window.history.replaceState(null, "", window.location.pathname);
  }
  function fill() {
    var field = document.getElementById("code");
    if (field && code) {
      field.value = code;
      var pw = document.getElementById("password");
      if (pw) {
        pw.focus();
      }
    }
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", fill);
  } else {
    fill();
  }
})();
