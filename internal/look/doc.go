// Package look is what every HTML page fleet writes itself looks like, on both doors (SPEC U1):
// the one stylesheet (look.css, served by each door at StylePath as a same-origin asset), the one
// layout and its partials (templates/), the pages that belong to no other package — a refusal,
// the console-down page, "pairing is not set up" — and the choice between a refusal's HTML page
// and its JSON (SPEC U5: Negotiate).
//
// A page of another package (the tailnet index in supervisor, the device's index in reach, the
// pairing page in pairing) is one template file of that package, parsed over this package's
// layout with Page; it defines "title" and "content" (and "head" for what goes in <head>).
//
// What it must not do: decide anything. It is told a refusal's status, reason word and detail
// and writes them; it never logs, and sets no header but the type of what it writes, Vary:
// Accept on an answer it chose the language of, and the stylesheet's nosniff and caching (the
// caller's package sets the Content-Security-Policy, framing, X-Fleet-Reason and a page's
// caching). It reads nothing of a request but its Accept lines, and never links to, loads or
// inlines anything from elsewhere: no inline script or style, no font, no image from another
// origin. It imports only the standard library, so that every door (proxy, reach, pairing,
// supervisor) can import it.
package look
