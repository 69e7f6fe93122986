package look

import "net/http"

// words is what a refusal page says above and below its detail: what happened, as its heading,
// and what the person can do next (SPEC U5). The detail, the one sentence of the refusal itself,
// goes between them.
type words struct{ title, next string }

const (
	nextIndex   = "Go back to fleet's index for the consoles you may open."
	nextTailnet = "Open fleet through this machine's tailnet name (https://<machine>.<tailnet>.ts.net/) from a device signed in to the tailnet, with Tailscale running."
	nextReload  = "Try again; if it keeps happening, the machine's log (fleet log) says why."
	nextPair    = "Make a new code on the machine with fleet reach pair, and open the link it prints on this device."
)

// reasonWords has the words of every reason word a page of fleet's own may be refused with.
var reasonWords = map[string]words{
	"assertion-sent":      {"This request carried fleet's identity headers", "Send it again without them: only fleet writes who is calling."},
	"bad-path":            {"This address is not one fleet serves", "Check the address. A console is at /c/<id>/; " + nextIndex},
	"bad-upgrade":         {"This upgrade is not forwarded", "Only a WebSocket upgrade without a body reaches a console."},
	"bad-body":            {"The request's body was malformed", nextReload},
	"body-timeout":        {"The request's body stopped arriving", "Check the connection and try again."},
	"body-too-large":      {"The request was too large", "Send less: the limit is in the sentence above."},
	"header-too-large":    {"The request's headers were too large", "Clear this site's data in the browser (large cookies), then try again."},
	"unverified":          {"fleet could not tell who you are", nextTailnet},
	"identity-mismatch":   {"The identity sent does not match the tailnet's", nextTailnet},
	"tcp-forwardable":     {"This machine's Tailscale set-up lets others in", "The machine's owner can fix it: fleet doctor there says what to change. Then reload."},
	"cross-origin":        {"Another site sent this request", "Open the page yourself, from its own address, not from a link or form on another site."},
	"not-granted":         {"You may not open this console", "Ask your tailnet's admin for a grant to it. " + nextIndex},
	"tagged-node":         {"Tagged machines are not let in", "Open fleet from a person's device, signed in to the tailnet as that person."},
	"funnel":              {"fleet is not open to the internet", nextTailnet},
	"self":                {"This request came from fleet itself", "Open fleet from another device of the tailnet, or, on this machine, open the console at its own address (fleet consoles lists them)."},
	"hooks":               {"Hooks are not served through fleet", "A hook is called on the machine itself, at the console's own address."},
	"reach-settings":      {"fleet's settings are not reachable here", "Change them on the machine: fleet reach status shows the door's settings."},
	"local-only":          {"The fleet API answers only on this machine", "Call it on the machine itself, with the bearer from fleet.token."},
	"not-owner":           {"Only the machine's owner may do this", "Sign in to the tailnet as the person who owns this machine, or use the fleet command on the machine."},
	"owner-form":          {"The form was malformed", "Reload the index and send the form from it again."},
	"unknown-device":      {"No paired device has that id", "Reload the index: the device may be revoked already. fleet reach devices on the machine lists them."},
	"unknown-console":     {"No console here has that id", nextIndex},
	"not-found":           {"There is no such page", nextIndex},
	"method":              {"This page does not take that method", "Open the page with a plain link. " + nextIndex},
	"host":                {"This address is not one this door answers", "Open fleet at this machine's own address: its tailnet name, or the door's address as fleet reach pair prints it."},
	"rate-limited":        {"Too many failed attempts from here", "Wait for the time in the sentence above, then try again, with a fresh code if yours has expired."},
	"console-other-user":  {"Another user's program holds this console's port", "On the machine, stop that program and start the console again."},
	"console-down":        {"The console is not answering", "Start the console again on the machine; this page tries again by itself."},
	"no-token":            {"fleet cannot vouch for anyone right now", "On the machine, fleet doctor says what is wrong with the fleet token. Then reload."},
	"internal":            {"fleet failed to answer this request", nextReload},
	"registry":            {"The console registry could not be written", "On the machine, fleet doctor says what is wrong with the state folder."},
	"bearer":              {"This needs fleet's bearer", "Call it on the machine, with the bearer from fleet.token (or metrics.token for the metrics)."},
	"bad-registration":    {"The console's registration was refused", "Fix what the sentence above names and register again."},
	"pairing":             {"The code or the password is wrong", nextPair},
	"pairing-code":        {"The pairing code cannot be used", nextPair},
	"pairing-password":    {"The pairing password is wrong", "Try again with the right password, before the code expires."},
	"pairing-form":        {"The pairing form was malformed", "Go back to the pairing page and send the form again."},
	"pairing-unavailable": {"The machine could not pair this device", "The machine's log (fleet log) says why. " + nextPair},
}

// wordsFor is reason's words, or, for a word not in reasonWords, the status's text and the way
// back to the index.
func wordsFor(reason string, status int) words {
	if w, ok := reasonWords[reason]; ok {
		return w
	}
	title := http.StatusText(status)
	if title == "" {
		title = "Refused"
	}
	return words{title, nextIndex}
}
