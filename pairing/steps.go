package pairing

import (
	"fmt"
	"net/netip"
	"strings"

	qrcode "github.com/skip2/go-qrcode"
)

// This file is what a person is handed to pair a device, wherever it is shown — `fleet reach
// pair` on a terminal, the owner's page in a browser (SPEC R8, U4): the door's two links and
// their QR codes. The steps' order is the point (trust the root first, then pair): see the
// pairing page (NewHandler).

// RootLink is the door's root certificate, GET /ca.crt on the door at listen (SPEC R4, R7). It
// holds no secret, so its QR code may be scanned first.
func RootLink(listen netip.AddrPort) string {
	return "https://" + listen.String() + "/ca.crt"
}

// PairLink is the door's pairing page with code in the #fragment: a browser never sends a
// fragment, so the code reaches no server, log or proxy (SPEC S11, R8), and never a query.
func PairLink(listen netip.AddrPort, code string) string {
	return "https://" + listen.String() + PairPath + "#" + code
}

// QRCodeSVG is a QR code of text (error correction Medium, as `fleet reach pair` prints it) as
// one inline SVG element: dark modules on a light square with its quiet zone, so that a phone
// scans it on a dark page too. label names it for a screen reader. Inline SVG is part of the
// page itself: a Content-Security-Policy needs no img-src for it.
func QRCodeSVG(text, label string) (string, error) {
	q, err := qrcode.New(text, qrcode.Medium)
	if err != nil {
		return "", err
	}
	bits := q.Bitmap() // with its quiet zone
	n := len(bits)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="qr" role="img" viewBox="0 0 %d %d" width="%d" height="%d" shape-rendering="crispEdges"><title>%s</title>`,
		n, n, n*5, n*5, htmlEscaper.Replace(label))
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/><path fill="#000" d="`, n, n)
	for y, row := range bits {
		for x, dark := range row {
			if dark {
				fmt.Fprintf(&b, "M%d %dh1v1h-1z", x, y)
			}
		}
	}
	b.WriteString(`"/></svg>`)
	return b.String(), nil
}

var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;")
