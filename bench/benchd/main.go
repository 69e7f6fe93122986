// Command benchd is the benchmark's helper (bench/run): the console that every proxy under test
// forwards to, a fake tailscaled LocalAPI that answers like a real one on a kernel TUN, and a
// client that holds many idle WebSockets open through a door to measure its memory, and Go's
// floor for a hop (floor.go): a proxy that does nothing but pass bytes on, to measure against.
//
//	benchd backend  -addr 127.0.0.1:18080
//	benchd localapi -socket /tmp/x/tailscaled.sock -caller 100.64.0.7 -login alice@example.com
//	benchd floor    -addr 127.0.0.1:18083 -backend 127.0.0.1:18080
//	benchd wsidle   -url ws://127.0.0.1:17420/c/bench/ws -n 10000 -pid PID [-message 1024] [-header 'K: V']...
//
// It is a measuring tool, not part of fleet: nothing here is imported by the product.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/tailcfg"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: benchd backend|localapi|floor|wsidle [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "backend":
		err = backend(os.Args[2:])
	case "localapi":
		err = localAPI(os.Args[2:])
	case "floor":
		err = floor(os.Args[2:])
	case "wsidle":
		err = wsIdle(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchd:", err)
		os.Exit(1)
	}
}

// backend is the console: /small answers a few bytes, /big 64 KiB, /ws holds a WebSocket open
// and echoes its messages.
func backend(args []string) error {
	fs := flag.NewFlagSet("backend", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:18080", "listen address")
	fs.Parse(args)
	small := []byte("hello, fleet\n")
	big := make([]byte, 64<<10)
	for i := range big {
		big[i] = 'a' + byte(i%26)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(small)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(big)
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		defer c.CloseNow()
		for { // echo each message
			typ, msg, err := c.Read(r.Context())
			if err != nil || c.Write(r.Context(), typ, msg) != nil {
				return
			}
		}
	})
	return serveUntilSignal(*addr, "tcp", mux)
}

// localAPI is a fake tailscaled: kernel TUN, one tailnet caller, ~360 ms to say "not found" for
// a loopback ip:port (as netstack's port-map retries take), no SSH, no Serve TCP forwards.
func localAPI(args []string) error {
	fs := flag.NewFlagSet("localapi", flag.ExitOnError)
	sock := fs.String("socket", "", "unix socket to serve on")
	caller := fs.String("caller", "100.64.0.7", "the tailnet caller's address")
	login := fs.String("login", "alice@example.com", "the caller's login")
	fs.Parse(args)
	self := netip.MustParseAddr("100.100.100.1")
	mux := http.NewServeMux()
	mux.HandleFunc("/localapi/v0/whois", func(w http.ResponseWriter, r *http.Request) {
		addr := r.URL.Query().Get("addr")
		if _, err := netip.ParseAddrPort(addr); err == nil {
			time.Sleep(360 * time.Millisecond)
			http.Error(w, "no match for IP:port", http.StatusNotFound)
			return
		}
		if addr != *caller {
			http.Error(w, "no match for IP:port", http.StatusNotFound)
			return
		}
		json.NewEncoder(w).Encode(&apitype.WhoIsResponse{
			Node:        &tailcfg.Node{ID: 7, StableID: "n7", Name: "phone."},
			UserProfile: &tailcfg.UserProfile{LoginName: *login},
		})
	})
	mux.HandleFunc("/localapi/v0/status", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(&ipnstate.Status{
			Version:      "1.102.5",
			TUN:          true,
			BackendState: "Running",
			TailscaleIPs: []netip.Addr{self},
			Self:         &ipnstate.PeerStatus{ID: "n1", DNSName: "bench.example.ts.net.", HostName: "bench", TailscaleIPs: []netip.Addr{self}},
		})
	})
	mux.HandleFunc("/localapi/v0/prefs", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(&ipn.Prefs{WantRunning: true, RunSSH: false})
	})
	mux.HandleFunc("/localapi/v0/serve-config", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Etag", "bench")
		json.NewEncoder(w).Encode(&ipn.ServeConfig{})
	})
	os.Remove(*sock)
	return serveUntilSignal(*sock, "unix", mux)
}

func serveUntilSignal(addr, network string, h http.Handler) error {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, os.Interrupt)
		<-ch
		srv.Close()
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}

type headerList []string

func (h *headerList) String() string     { return strings.Join(*h, ", ") }
func (h *headerList) Set(v string) error { *h = append(*h, v); return nil }

// wsIdle opens n WebSockets through url, leaves them idle, and reports how the RSS of process pid
// (the door) grew per connection.
func wsIdle(args []string) error {
	fs := flag.NewFlagSet("wsidle", flag.ExitOnError)
	url := fs.String("url", "", "ws:// URL through the door")
	n := fs.Int("n", 10000, "how many WebSockets")
	pid := fs.Int("pid", 0, "the door's pid, whose RSS is measured")
	message := fs.Int("message", 0, "bytes of one message each WebSocket sends and reads back before it idles (0: none)")
	var headers headerList
	fs.Var(&headers, "header", "a request header 'Name: value' (repeatable)")
	fs.Parse(args)
	h := http.Header{}
	for _, kv := range headers {
		k, v, _ := strings.Cut(kv, ":")
		h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	before, err := rssKiB(*pid)
	if err != nil {
		return err
	}
	conns := make([]*websocket.Conn, 0, *n)
	var mu sync.Mutex
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var firstErr error
	for i := 0; i < *n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, _, err := websocket.Dial(ctx, *url, &websocket.DialOptions{HTTPHeader: h})
			if err == nil && *message > 0 {
				// One round trip first, so that whatever buffers the door uses to move bytes
				// have been touched, as on a WebSocket that carried traffic and went quiet.
				err = echoOnce(ctx, c, *message)
				if err != nil {
					c.CloseNow()
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			conns = append(conns, c)
		}()
	}
	wg.Wait()
	time.Sleep(2 * time.Second) // let the door settle after the burst
	after, err := rssKiB(*pid)
	if err != nil {
		return err
	}
	ok := len(conns)
	for _, c := range conns {
		c.CloseNow()
	}
	if ok == 0 {
		return fmt.Errorf("no WebSocket opened: %v", firstErr)
	}
	fmt.Printf("websockets=%d failed=%d message=%d rss_before_kib=%d rss_after_kib=%d per_conn_kib=%.1f\n",
		ok, *n-ok, *message, before, after, float64(after-before)/float64(ok))
	if firstErr != nil {
		fmt.Fprintln(os.Stderr, "benchd: first failure:", firstErr)
	}
	return nil
}

// echoOnce sends one message of n bytes on c and reads it back.
func echoOnce(ctx context.Context, c *websocket.Conn, n int) error {
	msg := make([]byte, n)
	for i := range msg {
		msg[i] = byte('a' + i%26)
	}
	if err := c.Write(ctx, websocket.MessageBinary, msg); err != nil {
		return err
	}
	_, got, err := c.Read(ctx)
	if err == nil && len(got) != n {
		err = fmt.Errorf("echo of %d bytes came back as %d", n, len(got))
	}
	return err
}

func rssKiB(pid int) (int, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}
