// The pairing link carries the code in its #fragment, which never reaches a server or a log.
// Move it into the form, then drop it from the address bar and the history. The focus stays where
// it is: the page is read from the top, where it says to stop on a certificate warning, and no
// password field is focused for the user (which would scroll past that notice).
(function () {
  "use strict";
  // The trust steps are folded (a <details>) on a LAN door's page: a link to #trust opens them.
  document.addEventListener("click", function (e) {
    var a = e.target && e.target.closest ? e.target.closest('a[href="#trust"]') : null;
    var steps = document.getElementById("trust-steps");
    if (a && steps) {
      steps.open = true;
    }
  });
  var h = window.location.hash;
  if (!h || h.length < 2 || document.getElementById(h.slice(1))) {
    return; // no code, or the page's own links (#trust, #pair) and a reload after one
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
    }
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", fill);
  } else {
    fill();
  }
})();
