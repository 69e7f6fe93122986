package look

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"time"
)

// StylePath is where each door serves Stylesheet (ServeStyle), to every caller: on the
// direct-reach door an unpaired caller gets it too, as one of the pairing page's assets (SPEC R7).
const StylePath = "/fleet.css"

// Stylesheet is fleet's one stylesheet (look.css).
//
//go:embed look.css
var Stylesheet []byte

//go:embed templates
var templateFiles embed.FS

// base is the layout and the partials, cloned under every page.
// Its root template is the layout, so that a page's Execute writes the whole page.
var base = template.Must(template.Must(template.New("look").Funcs(template.FuncMap{
	"stylePath": func() string { return StylePath },
	"sentence":  sentence,
}).Parse(`{{template "layout" .}}`)).ParseFS(templateFiles, "templates/layout.html", "templates/partials.html"))

// sentence is detail ending as a sentence does: with a full stop unless it has one, or a ? or !.
func sentence(detail string) string {
	if detail == "" || strings.HasSuffix(detail, ".") || strings.HasSuffix(detail, "?") || strings.HasSuffix(detail, "!") {
		return detail
	}
	return detail + "."
}

// Page parses the files of fsys that patterns name over the layout and its partials, and panics
// if they do not parse (pages are parsed once, at start-up). The files define "title" and
// "content", and may define "head"; Render writes the whole page.
func Page(fsys fs.FS, patterns ...string) *template.Template {
	return template.Must(template.Must(base.Clone()).ParseFS(fsys, patterns...))
}

// Render writes page, made by Page, with data (as page.Execute does).
func Render(w io.Writer, page *template.Template, data any) error {
	return page.Execute(w, data)
}

// The pages of this package's own.
var (
	refusalPage  = Page(templateFiles, "templates/refusal.html")
	downPage     = Page(templateFiles, "templates/down.html")
	notSetUpPage = Page(templateFiles, "templates/notsetup.html")
)

// styleETag names this build's Stylesheet, so that a browser's revalidation (Cache-Control:
// no-cache) costs a 304, not the sheet.
var styleETag = func() string {
	sum := sha256.Sum256(Stylesheet)
	return `"` + hex.EncodeToString(sum[:8]) + `"`
}()

// ServeStyle answers a GET or HEAD of StylePath with Stylesheet (304 to a browser that holds this
// build's). The caller routes only those methods here and sets the door's own headers; this sets
// the type, nosniff and caching.
func ServeStyle(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/css; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", styleETag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(Stylesheet))
}

// WriteRefusal writes the status and body of a refusal in the language r asks for (SPEC U5):
// the HTML page (U1) when its Accept prefers text/html (PrefersHTML), else JSON as
// WriteRefusalJSON writes it. The caller has logged the refusal and set every other header
// (X-Fleet-Reason among them); this sets Content-Type and Vary.
func WriteRefusal(w http.ResponseWriter, r *http.Request, status int, reason, detail string) {
	w.Header().Add("Vary", "Accept")
	if !PrefersHTML(r) {
		WriteRefusalJSON(w, status, reason, detail)
		return
	}
	words := wordsFor(reason, status)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	Render(w, refusalPage, refusalData{Status: status, Reason: reason, Title: words.title,
		Detail: detail, Next: words.next})
}

// A RefusalBody is the JSON body of a refusal (SPEC U5).
type RefusalBody struct {
	Error  string `json:"error"`  // the reason word, as in X-Fleet-Reason
	Detail string `json:"detail"` // one sentence for a person
}

// WriteRefusalJSON writes the status and the JSON body of a refusal, whatever the caller asked
// for: {"error":"<reason word>","detail":"<one sentence>"}. The metrics and registry endpoints
// answer only this way (SPEC U5).
func WriteRefusalJSON(w http.ResponseWriter, status int, reason, detail string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(RefusalBody{Error: reason, Detail: detail}) // strings only: never fails
	w.Write(append(b, '\n'))
}

type refusalData struct {
	Status                      int
	Reason, Title, Detail, Next string
}

// DownRefresh is how often, in seconds, the console-down page tries again by itself (SPEC U6).
const DownRefresh = 5

// WriteConsoleDown writes the console-down answer (502, reason console-down) for console id in
// the language r asks for: the page names the console and reloads itself every DownRefresh
// seconds (SPEC U6), so a phone left on it opens the console once it answers again.
func WriteConsoleDown(w http.ResponseWriter, r *http.Request, id string) {
	w.Header().Add("Vary", "Accept")
	if !PrefersHTML(r) {
		WriteRefusalJSON(w, http.StatusBadGateway, "console-down",
			"console "+id+" is not answering; start it again on the machine")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusBadGateway)
	Render(w, downPage, struct {
		ID      string
		Refresh int
	}{id, DownRefresh})
}

// WriteNotSetUp writes the page a door without pairing pages answers in their place (200).
func WriteNotSetUp(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	Render(w, notSetUpPage, nil)
}
