package console

import (
	"context"
	"encoding/json"
	"net/http"
	"path"
	"strings"

	"github.com/phase-console/fleet/contract"
)

// Log event names.
const (
	EventRejected     = "console.rejected" // every refusal but the permission hook's
	EventHookRejected = "hook.rejected"    // a refusal of a request for /hooks and below (C6)
)

type ctxKey int

const (
	callerKey ctxKey = iota
	runKey
	peerKey
)

// CallerFrom returns the caller that Middleware judged. ok is false when the request did not go
// through Middleware; nothing a client sends can set it.
func CallerFrom(ctx context.Context) (c Caller, ok bool) {
	c, ok = ctx.Value(callerKey).(Caller)
	return c, ok
}

// RunFrom returns the id of the run whose bearer PermissionHook accepted.
func RunFrom(ctx context.Context) (id string, ok bool) {
	id, ok = ctx.Value(runKey).(string)
	return id, ok
}

// Middleware judges every request before next sees it:
//
//   - a request for /hooks or below (first path segment "hooks", any case) first meets the C6
//     transport checks of PermissionHook (403 "not loopback" / "not local", logged as
//     hook.rejected), so that nothing about a hook request is judged before them;
//   - then Judge: a refusal is answered (status, X-Fleet-Reason, JSON body) and logged;
//   - otherwise next is called with the Caller in the context (CallerFrom) and with every spelling
//     of both assertion headers removed from the request's headers, so that no handler or access
//     log downstream ever holds the fleet token.
func (v *Verifier) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		event := EventRejected
		if isHookPath(r.URL.Path) {
			event = EventHookRejected
			if ref := v.hookTransport(r); ref != nil {
				v.Refuse(w, r, ref, event)
				return
			}
		}
		c, ref := v.Judge(r)
		if ref != nil {
			v.Refuse(w, r, ref, event)
			return
		}
		r2 := r.WithContext(context.WithValue(r.Context(), callerKey, c))
		r2.Header = r.Header.Clone()
		for name := range r2.Header {
			if contract.IsAssertionName(name) {
				delete(r2.Header, name)
			}
		}
		next.ServeHTTP(w, r2)
	})
}

// caller returns the caller from Middleware, or judges r now (a guard used without Middleware
// fails closed the same way). On a refusal it has answered and returns ok false.
func (v *Verifier) caller(w http.ResponseWriter, r *http.Request, event string) (Caller, bool) {
	if c, ok := CallerFrom(r.Context()); ok {
		return c, true
	}
	c, ref := v.Judge(r)
	if ref != nil {
		v.Refuse(w, r, ref, event)
		return Caller{}, false
	}
	return c, true
}

// LocalOnly serves next to scope local only; scope remote is 403 local-only (C5: presence).
func (v *Verifier) LocalOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := v.caller(w, r, EventRejected)
		if !ok {
			return
		}
		if c.Scope != Local {
			v.Refuse(w, r, refusal(http.StatusForbidden, ReasonLocalOnly, "C5", "only a local caller may do this"), EventRejected)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// PermissionHook guards POST /hooks/permission-request (C6). Its checks, the first failing one
// answering, every refusal logged as hook.rejected with its reason:
//
//  1. the TCP peer is not a loopback address: 403 "not loopback";
//  2. the request came through a proxy — it carries an assertion header, the proxy identity header,
//     Forwarded, X-Forwarded-*, X-Real-Ip or Tailscale-* (any spelling): 403 "not local". Both come
//     before the token is looked at and before C1–C3;
//  3. Judge (Host, Origin) and C5: scope remote is 403 local-only;
//  4. the bearer (Authorization: Bearer <run token>, exactly one) must be the token of a run that
//     runs has not ended, compared in constant time: else 401 bad-run-token.
//
// next sees the run's id (RunFrom) and no Authorization header. A nil runs refuses every request.
func (v *Verifier) PermissionHook(runs *Runs, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ref := v.hookTransport(r); ref != nil {
			v.Refuse(w, r, ref, EventHookRejected)
			return
		}
		c, ok := v.caller(w, r, EventHookRejected)
		if !ok {
			return
		}
		if c.Scope != Local {
			v.Refuse(w, r, refusal(http.StatusForbidden, ReasonLocalOnly, "C5", "the permission hook is local only"), EventHookRejected)
			return
		}
		var id string
		if runs != nil {
			tok, _ := contract.ParseBearer(r.Header)
			id, ok = runs.Match(tok)
		}
		if runs == nil || !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="run"`)
			v.Refuse(w, r, refusal(http.StatusUnauthorized, ReasonBadRunToken, "C6", "no live run has this bearer"), EventHookRejected)
			return
		}
		r2 := r.WithContext(context.WithValue(r.Context(), runKey, id))
		r2.Header = r.Header.Clone()
		r2.Header.Del("Authorization")
		next.ServeHTTP(w, r2)
	})
}

// ReachSettings guards the console's reach settings (C7): a caller whose login is a device login
// ("device:…", any case) may read them (GET, HEAD) but any other method is 403 reach-settings.
func (v *Verifier) ReachSettings(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := v.caller(w, r, EventRejected)
		if !ok {
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && IsDeviceLogin(c.Login) {
			v.Refuse(w, r, refusal(http.StatusForbidden, ReasonReachSettings, "C7", "a paired device cannot change reach settings"), EventRejected)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// IsDeviceLogin reports whether login has the shape that the direct-reach door asserts for a
// paired device ("device:<slug>#<id6>"), compared without regard to case.
func IsDeviceLogin(login string) bool {
	return len(login) >= len("device:") && strings.EqualFold(login[:len("device:")], "device:")
}

// hookTransport is C6's first two checks.
func (v *Verifier) hookTransport(r *http.Request) *Refusal {
	if !loopbackPeer(r.RemoteAddr) {
		return refusal(http.StatusForbidden, ReasonHookPeer, "C6", "the hook request did not arrive on loopback")
	}
	if readAssertion(r).carried || v.proxied(r.Header) {
		return refusal(http.StatusForbidden, ReasonHookProxied, "C6", "the hook request came through a proxy")
	}
	return nil
}

// isHookPath reports whether the first segment of the cleaned path is "hooks", any case.
func isHookPath(p string) bool {
	p = strings.TrimPrefix(path.Clean("/"+p), "/")
	first, _, _ := strings.Cut(p, "/")
	return strings.EqualFold(first, "hooks")
}

// Refuse answers r with ref and logs it as one JSON line with the given event name (EventRejected
// or EventHookRejected): the reason, status, rule, method, path (never the query), peer and detail.
// The answer is ref.Status, the header X-Fleet-Reason: <reason> and the body {"error":"<reason>"}.
// A Refusal holds no secret, so neither does the answer or the log line.
func (v *Verifier) Refuse(w http.ResponseWriter, r *http.Request, ref *Refusal, event string) {
	p := contract.LogPath(r)
	if p == "" {
		p = r.URL.EscapedPath()
	}
	v.log.Warn(event, "reason", ref.Reason, "status", ref.Status, "rule", ref.Rule,
		"method", r.Method, "path", p, "peer", r.RemoteAddr, "detail", ref.Detail)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Fleet-Reason", ref.Reason)
	w.WriteHeader(ref.Status)
	body, _ := json.Marshal(map[string]string{"error": ref.Reason})
	w.Write(append(body, '\n'))
}
