package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/state"
)

// newTestRegistry is a registry in a fresh private folder whose probes never dial: each probe
// answers at once that nothing listens, unless the test sets r.dial.
func newTestRegistry(t testing.TB) *Registry {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fleet")
	if err := state.EnsureDir(dir); err != nil {
		t.Fatal(err)
	}
	r, err := LoadRegistry(filepath.Join(dir, state.RegistryFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	r.dial = func(context.Context, string) error { return syscall.ECONNREFUSED }
	return r
}

// countingWriter counts the registry's writes and passes them on.
type countingWriter struct {
	mu     sync.Mutex
	writes int
	next   func(string, []byte) error
}

func (w *countingWriter) write(path string, data []byte) error {
	w.mu.Lock()
	w.writes++
	w.mu.Unlock()
	return w.next(path, data)
}

func (w *countingWriter) count() int { w.mu.Lock(); defer w.mu.Unlock(); return w.writes }

// TestReRegistrationDoesNotWrite_S8: a console re-registers every 5 s; consoles.json is written
// only when its id, addr or name changed, so the refresh costs no write and no fsync.
func TestReRegistrationDoesNotWrite_S8(t *testing.T) {
	r := newTestRegistry(t)
	w := &countingWriter{next: r.write}
	r.write = w.write
	alpha := Console{ID: "alpha", Addr: "127.0.0.1:9001", Name: "Alpha"}
	if created, err := r.Put(alpha); err != nil || !created {
		t.Fatalf("first Put = %v, %v", created, err)
	}
	if w.count() != 1 {
		t.Fatalf("%d writes for a new console, want 1", w.count())
	}
	first, _ := r.Get("alpha")
	st1, err := os.Stat(r.path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if created, err := r.Put(alpha); err != nil || created {
			t.Fatalf("refresh Put = %v, %v", created, err)
		}
	}
	if w.count() != 1 {
		t.Errorf("S8 refresh: %d writes, want still 1", w.count())
	}
	st2, _ := os.Stat(r.path)
	if !os.SameFile(st1, st2) || !st1.ModTime().Equal(st2.ModTime()) {
		t.Error("S8 refresh: consoles.json was replaced")
	}
	if again, _ := r.Get("alpha"); again != first {
		t.Errorf("S8 refresh changed the console: %+v -> %+v", first, again)
	}
	for i, c := range []Console{
		{ID: "alpha", Addr: "127.0.0.1:9001", Name: "Alpha 2"},
		{ID: "alpha", Addr: "127.0.0.1:9002", Name: "Alpha 2"},
		{ID: "beta", Addr: "127.0.0.1:9002"},
	} {
		if _, err := r.Put(c); err != nil {
			t.Fatal(err)
		}
		if w.count() != 2+i {
			t.Errorf("S8 change %+v: %d writes, want %d", c, w.count(), 2+i)
		}
		if got, _ := r.Get(c.ID); got.Addr != c.Addr || got.Name != c.Name {
			t.Errorf("S8 change %+v: Get gives %+v", c, got)
		}
	}
	if ok, err := r.Delete("beta"); !ok || err != nil || w.count() != 5 {
		t.Errorf("Delete = %v, %v, %d writes; want a write", ok, err, w.count())
	}
	if ok, _ := r.Delete("beta"); ok || w.count() != 5 {
		t.Errorf("Delete of an unknown id wrote or said yes")
	}
	// What is on disk is what Get serves.
	again, err := LoadRegistry(r.path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := again.Get("alpha"); a.Addr != "127.0.0.1:9002" || a.Name != "Alpha 2" {
		t.Errorf("reloaded alpha = %+v", a)
	}
	if _, ok := again.Get("beta"); ok {
		t.Error("reloaded registry still has beta")
	}
}

// TestRefreshKeepsLastSeen_S8: a refresh writes nothing but still counts as a sign of life.
func TestRefreshKeepsLastSeen_S8(t *testing.T) {
	r := newTestRegistry(t)
	now := time.Unix(1000, 0).UTC()
	var mu sync.Mutex
	r.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	alpha := Console{ID: "alpha", Addr: "127.0.0.1:9001"}
	r.Put(alpha)
	mu.Lock()
	now = now.Add(5 * time.Second)
	mu.Unlock()
	r.Put(alpha)
	if l := r.List(); len(l) != 1 || !l[0].LastSeen.Equal(time.Unix(1005, 0)) || !l[0].Registered.Equal(time.Unix(1000, 0)) {
		t.Fatalf("after a refresh: %+v; want last seen 1005, registered 1000", l)
	}
}

// blockingWriter holds every write until release is closed, telling entered when one starts.
type blockingWriter struct {
	entered chan struct{}
	release chan struct{}
	next    func(string, []byte) error
}

func (w *blockingWriter) write(path string, data []byte) error {
	w.entered <- struct{}{}
	<-w.release
	return w.next(path, data)
}

// TestGetNotBlockedByWrite_S8: every proxied request looks its console up; a registry write in
// progress (a slow disk, an fsync) must not hold it up. The write is held open with a channel
// while Get, List and markDown run; the only timer is a guard against a hang, never an assertion
// about speed.
func TestGetNotBlockedByWrite_S8(t *testing.T) {
	r := newTestRegistry(t)
	if _, err := r.Put(Console{ID: "alpha", Addr: "127.0.0.1:9001"}); err != nil {
		t.Fatal(err)
	}
	w := &blockingWriter{entered: make(chan struct{}), release: make(chan struct{}), next: r.write}
	r.write = w.write
	putDone := make(chan error, 1)
	go func() {
		_, err := r.Put(Console{ID: "alpha", Addr: "127.0.0.1:9002"})
		putDone <- err
	}()
	<-w.entered // the write is in progress, and stays so until release

	got := make(chan Console, 1)
	go func() {
		c, _ := r.Get("alpha")
		r.List()
		r.markDown("alpha")
		got <- c
	}()
	select {
	case c := <-got:
		if c.Addr != "127.0.0.1:9001" {
			t.Errorf("during the write Get gave %q, want the old addr", c.Addr)
		}
	case <-time.After(doortest.WaitLimit):
		t.Error("S8 Get waited for a registry write")
	}
	close(w.release)
	if err := <-putDone; err != nil {
		t.Fatal(err)
	}
	if c, _ := r.Get("alpha"); c.Addr != "127.0.0.1:9002" {
		t.Errorf("after the write Get gave %q, want the new addr", c.Addr)
	}
}

// TestRegistryWriteFailureKeepsSnapshot_F2: a failed write changes nothing that Get or List see.
func TestRegistryWriteFailureKeepsSnapshot_F2(t *testing.T) {
	r := newTestRegistry(t)
	r.Put(Console{ID: "alpha", Addr: "127.0.0.1:9001"})
	r.write = func(string, []byte) error { return errors.New("disk full") }
	if _, err := r.Put(Console{ID: "alpha", Addr: "127.0.0.1:9002"}); err == nil {
		t.Fatal("Put succeeded although the write failed")
	}
	if _, err := r.Put(Console{ID: "beta", Addr: "127.0.0.1:9003"}); err == nil {
		t.Fatal("Put succeeded although the write failed")
	}
	if ok, err := r.Delete("alpha"); ok || err == nil {
		t.Fatal("Delete succeeded although the write failed")
	}
	if c, ok := r.Get("alpha"); !ok || c.Addr != "127.0.0.1:9001" {
		t.Errorf("alpha = %+v, %v after failed writes", c, ok)
	}
	if _, ok := r.Get("beta"); ok || len(r.List()) != 1 {
		t.Errorf("a failed registration shows: %+v", r.List())
	}
}

// heldDial is a probe dial that reports each address it is asked about and answers only when the
// test says what to answer.
type heldDial struct {
	asked  chan string
	answer chan error
}

func (d *heldDial) dial(ctx context.Context, addr string) error {
	d.asked <- addr
	return <-d.answer
}

// probed waits for the next probe dial (or gives up after doortest.WaitLimit: a guard, not a measure).
func (d *heldDial) probed(t *testing.T) string {
	t.Helper()
	select {
	case addr := <-d.asked:
		return addr
	case <-time.After(doortest.WaitLimit):
		t.Fatal("S8 no probe was started")
		return ""
	}
}

func healthOf(t *testing.T, r *Registry, id string) ConsoleStatus {
	t.Helper()
	for _, c := range r.List() {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("%s is not listed", id)
	return ConsoleStatus{}
}

// TestNewConsoleHealthUnknown_S8: a console that just registered is neither up nor down until it
// has been probed; it is probed at once, in the background.
func TestNewConsoleHealthUnknown_S8(t *testing.T) {
	r := newTestRegistry(t)
	d := &heldDial{asked: make(chan string), answer: make(chan error)}
	r.dial = d.dial
	if _, err := r.Put(Console{ID: "alpha", Addr: "127.0.0.1:9001"}); err != nil {
		t.Fatal(err)
	}
	if c := healthOf(t, r, "alpha"); c.Health != HealthUnknown || c.Up {
		t.Errorf("S8 before the first probe: health %q up %v; want unknown, false", c.Health, c.Up)
	}
	b, _ := json.Marshal(r.List())
	if !strings.Contains(string(b), `"health":"unknown"`) || !strings.Contains(string(b), `"up":false`) {
		t.Errorf("S8 the listing says %s", b)
	}
	if addr := d.probed(t); addr != "127.0.0.1:9001" { // probed at once, not at the next tick
		t.Errorf("probed %s", addr)
	}
	d.answer <- nil
	r.probes.Wait()
	if c := healthOf(t, r, "alpha"); c.Health != HealthUp || !c.Up {
		t.Errorf("S8 after a probe that answered: %q %v", c.Health, c.Up)
	}

	// A refresh keeps what is known and probes nothing; a new addr is unknown again.
	if _, err := r.Put(Console{ID: "alpha", Addr: "127.0.0.1:9001"}); err != nil {
		t.Fatal(err)
	}
	if c := healthOf(t, r, "alpha"); c.Health != HealthUp {
		t.Errorf("S8 a refresh made alpha %q", c.Health)
	}
	r.Put(Console{ID: "alpha", Addr: "127.0.0.1:9002"})
	if c := healthOf(t, r, "alpha"); c.Health != HealthUnknown || c.Up {
		t.Errorf("S8 a new addr kept the old health: %q", c.Health)
	}
	if addr := d.probed(t); addr != "127.0.0.1:9002" {
		t.Errorf("probed %s", addr)
	}
	d.answer <- syscall.ECONNREFUSED
	r.probes.Wait()
	if c := healthOf(t, r, "alpha"); c.Health != HealthDown || c.Up {
		t.Errorf("S8 after a probe that found nothing: %q %v", c.Health, c.Up)
	}
}

// TestStaleProbeDoesNotOverrule_S8: a probe that started before a forward failed does not mark
// the console up again with what it saw before.
func TestStaleProbeDoesNotOverrule_S8(t *testing.T) {
	r := newTestRegistry(t)
	d := &heldDial{asked: make(chan string), answer: make(chan error)}
	r.dial = d.dial
	r.Put(Console{ID: "alpha", Addr: "127.0.0.1:9001"})
	d.probed(t)         // the probe dialled while alpha was alive...
	r.markDown("alpha") // ...then a forward failed
	d.answer <- nil
	r.probes.Wait()
	if c := healthOf(t, r, "alpha"); c.Health != HealthDown {
		t.Errorf("S8 a stale probe overruled a newer failure: %q", c.Health)
	}
}

// BenchmarkRegistryGet is the lookup every proxied request makes (run with -benchmem: it must
// not allocate).
func BenchmarkRegistryGet(b *testing.B) {
	r := newTestRegistry(b)
	for i := 0; i < 50; i++ {
		r.Put(Console{ID: "c" + strconv.Itoa(i), Addr: "127.0.0.1:" + strconv.Itoa(9000+i)})
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok := r.Get("c7"); !ok {
				b.Fatal("c7 missing")
			}
		}
	})
}

// TestIndexShowsHealth_S8: the index page says unknown, up or down as the registry does, and the
// API says "health" beside the older "up".
func TestIndexShowsHealth_S8(t *testing.T) {
	var b strings.Builder
	err := indexPage.Execute(&b, map[string]any{"Login": doortest.Alice, "Consoles": []ConsoleStatus{
		{Console: Console{ID: "new"}, Health: HealthUnknown, URL: "/c/new/"},
		{Console: Console{ID: "live"}, Health: HealthUp, Up: true, URL: "/c/live/"},
		{Console: Console{ID: "gone"}, Health: HealthDown, URL: "/c/gone/"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`<small>new</small> <span class="unknown">unknown</span>`,
		`<small>live</small> <span class="up">up</span>`,
		`<small>gone</small> <span class="down">down</span>`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("S8 the index page lacks %s:\n%s", want, b.String())
		}
	}
	d := startDoor(t)
	d.srv.registry.probes.Wait()
	body := d.Raw(d.localReq("GET", "/fleet/v1/consoles", "", d.bearer())).Body
	if !strings.Contains(body, `"health": "up"`) || !strings.Contains(body, `"up": true`) {
		t.Errorf(`S8 the API listing lacks "health": "up" beside "up": true: %s`, body)
	}
}
