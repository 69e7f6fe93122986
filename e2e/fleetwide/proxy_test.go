package fleetwide

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// dialFunc dials an address of the tailnet: a tsnet.Server's Dial.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// tailnetProxy is an HTTP proxy on 127.0.0.1 that reaches everything through one tailnet node:
// CONNECT host:port is a tunnel dialled by that node (MagicDNS names resolve as the node
// resolves them), a plain request with an absolute URL is forwarded by a transport that dials
// the same way. It is how a browser outside the tailnet uses the person's node as its network.
type tailnetProxy struct {
	addr string
	dial dialFunc

	mu      sync.Mutex
	tunnels []string // CONNECT targets, in order
}

func startTailnetProxy(t *testing.T, ctx context.Context, dial dialFunc) *tailnetProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tailnetProxy{addr: ln.Addr().String(), dial: dial}
	plain := &http.Transport{DialContext: dial, ForceAttemptHTTP2: false}
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodConnect {
				p.tunnel(w, r)
				return
			}
			if r.URL.Host == "" {
				http.Error(w, "a proxy request needs an absolute URL", http.StatusBadRequest)
				return
			}
			out := r.Clone(r.Context())
			out.RequestURI = ""
			out.Header.Del("Proxy-Connection")
			resp, err := plain.RoundTrip(out)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			for k, vs := range resp.Header {
				w.Header()[k] = vs
			}
			w.WriteHeader(resp.StatusCode)
			io.Copy(w, resp.Body)
		}),
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		plain.CloseIdleConnections()
	})
	return p
}

func (p *tailnetProxy) tunnel(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.tunnels = append(p.tunnels, r.Host)
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	up, err := p.dial(ctx, "tcp", r.Host)
	cancel()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	down, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		return
	}
	io.WriteString(down, "HTTP/1.1 200 Connection Established\r\n\r\n")
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		// Bytes the browser sent after CONNECT, already buffered, go first.
		if n := brw.Reader.Buffered(); n > 0 {
			b, _ := brw.Reader.Peek(n)
			up.Write(b)
		}
		io.Copy(up, down)
		closeWrite(up)
	}()
	go func() {
		defer wg.Done()
		io.Copy(down, up)
		closeWrite(down)
	}()
	wg.Wait()
	up.Close()
	down.Close()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close()
	}
}

// tunnelled reports whether a CONNECT to hostPort went through the proxy.
func (p *tailnetProxy) tunnelled(hostPort string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.tunnels {
		if h == hostPort {
			return true
		}
	}
	return false
}
