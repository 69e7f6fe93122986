package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/pairing"
)

var deviceSizes = []int{10, 1000, 10000}

// pairedRegister is a device register of n devices, written as devices.json is (one pairing
// each would rewrite the file n times), and the credential and id6 of each device.
type pairedRegister struct {
	dir   string
	reg   *pairing.Register
	creds []string
	ids   []string
	size  int64 // of devices.json
}

func newPairedRegister(parent string, n int) (*pairedRegister, error) {
	p := &pairedRegister{dir: filepath.Join(parent, fmt.Sprintf("devices-%d", n))}
	if err := state.EnsureDir(p.dir); err != nil {
		return nil, err
	}
	type record struct {
		ID6     string    `json:"id6"`
		Name    string    `json:"name"`
		Slug    string    `json:"slug"`
		SHA256  string    `json:"credential_sha256"`
		Created time.Time `json:"created"`
	}
	f := struct {
		Format  int      `json:"format"` // the format fleet writes (package pairing)
		Devices []record `json:"devices"`
	}{Format: 2}
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		raw := make([]byte, pairing.CredentialBytes)
		rand.Read(raw)
		cred := base64.RawURLEncoding.EncodeToString(raw)
		sum := sha256.Sum256([]byte(cred))
		id := make([]byte, 6)
		for j, v := 0, i; j < 6; j, v = j+1, v/32 {
			id[5-j] = alphabet[v%32]
		}
		name := fmt.Sprintf("phone-%05d", i)
		f.Devices = append(f.Devices, record{ID6: string(id), Name: name, Slug: name, SHA256: hex.EncodeToString(sum[:]), Created: created.Add(time.Duration(i) * time.Second)})
		p.creds, p.ids = append(p.creds, cred), append(p.ids, string(id))
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(p.dir, pairing.DevicesFile)
	if err := state.WritePrivateFile(path, append(data, '\n')); err != nil {
		return nil, err
	}
	p.size = int64(len(data) + 1)
	return p, nil
}

// devicesGroup is the devices rows (see the command's doc).
func devicesGroup(out io.Writer) error {
	parent, err := os.MkdirTemp("", "fleet-scale-devices.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(parent)
	regs := make([]*pairedRegister, len(deviceSizes))
	heap := make([]float64, len(deviceSizes))
	for k, n := range deviceSizes {
		if regs[k], err = newPairedRegister(parent, n); err != nil {
			return err
		}
		before := heapInUse()
		if regs[k].reg, err = pairing.OpenRegister(regs[k].dir); err != nil {
			return err
		}
		heap[k] = float64(heapInUse() - before)
	}
	runtime.KeepAlive(regs)

	// The check of every request, first and last device, sizes in turn. The clock moves 1 ms a
	// check, so last-seen is written once per device here (the warm-up), not in the samples.
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	check := func(p *pairedRegister, i int) (time.Duration, error) {
		now = now.Add(time.Millisecond)
		start := time.Now()
		_, ok := p.reg.Authenticate(p.creds[i], now, "192.0.2.7:4242")
		took := time.Since(start)
		if !ok {
			return 0, fmt.Errorf("device %d of %d not believed", i, len(p.creds))
		}
		return took, nil
	}
	first, last := make([]samples, len(regs)), make([]samples, len(regs))
	for r := -10; r < 20000; r++ {
		for k, p := range regs {
			a, err := check(p, 0)
			if err != nil {
				return err
			}
			b, err := check(p, len(p.creds)-1)
			if err != nil {
				return err
			}
			if r >= 0 {
				first[k], last[k] = append(first[k], a), append(last[k], b)
			}
		}
	}
	// The check that writes last-seen: the clock jumps past LastSeenInterval before each.
	seen := make([]samples, len(regs))
	for range 20 {
		for k, p := range regs {
			now = now.Add(pairing.LastSeenInterval + time.Second)
			d, err := check(p, len(p.creds)/2)
			if err != nil {
				return err
			}
			seen[k] = append(seen[k], d)
		}
	}
	// A revocation written by another process (fleet reach revoke), until the next check
	// refuses the device; and until the register's watch (fleet serve's, every
	// RefreshInterval) tells its subscribers, which end the device's open streams.
	const revocations = 3 // devices 1–3 by the watch, 4–6 by the check
	revoke, refuse, told := make([]samples, len(regs)), make([]samples, len(regs)), make([]samples, len(regs))
	for k, p := range regs {
		gone := make(chan string, 16)
		p.reg.OnRevoke(func(id6 string) { gone <- id6 })
		stop := make(chan struct{})
		go p.reg.Watch(stop, pairing.RefreshInterval)
		for trial := range revocations {
			i := 1 + trial
			start := time.Now()
			if err := pairing.RevokeDevice(p.dir, p.ids[i]); err != nil {
				close(stop)
				return err
			}
			revoke[k] = append(revoke[k], time.Since(start))
			select {
			case <-gone:
				told[k] = append(told[k], time.Since(start))
			case <-time.After(10 * time.Second):
				close(stop)
				return fmt.Errorf("revocation of %s not told within 10 s", p.ids[i])
			}
			// And by the check itself, without the watch: the next trial's device.
			j := 1 + revocations + trial
			start = time.Now()
			if err := pairing.RevokeDevice(p.dir, p.ids[j]); err != nil {
				close(stop)
				return err
			}
			if _, ok := p.reg.Authenticate(p.creds[j], now, "192.0.2.7:4242"); ok {
				close(stop)
				return fmt.Errorf("revoked device %s still believed", p.ids[j])
			}
			refuse[k] = append(refuse[k], time.Since(start))
			<-gone
		}
		close(stop)
	}

	hi := len(regs) - 1
	line := func(cost, expected string, s []samples, p float64) {
		text := ""
		for k := range s {
			if k > 0 {
				text += " · "
			}
			text += fmt.Sprintf("%d: %s", deviceSizes[k], ms(s[k].pct(p)))
		}
		row(out, cost, expected, text, fmt.Sprintf("%.2f× (%d vs %d)", float64(s[hi].pct(p))/float64(s[0].pct(p)), deviceSizes[hi], deviceSizes[0]))
	}
	line("device check of a request (pairing.Register.Authenticate), first device, p50", "O(1)", first, 0.5)
	line("device check, last device, p50", "O(1)", last, 0.5)
	line("device check, last device, p99", "O(1)", last, 0.99)
	line("device check that writes last-seen (once per device per 30 s), p50", "O(1) on the request's path", seen, 0.5)
	line("revocation by another process: RevokeDevice (file rewritten), p50", "O(n), off the request's path", revoke, 0.5)
	line("revocation until the next request is refused, max of 3", "≤ 1 s (P1)", refuse, 1)
	line("revocation until open streams are ended (register watch, every 500 ms), max of 3", "≤ 1 s (P1)", told, 1)
	sizes := ""
	for k, p := range regs {
		if k > 0 {
			sizes += " · "
		}
		sizes += fmt.Sprintf("%d: %s", deviceSizes[k], kib(float64(p.size)))
	}
	row(out, "devices.json", "O(n); read up to 4 MiB", sizes, "–")
	row(out, "heap per paired device (register in memory)", "O(1) each", kib(heap[hi]/float64(deviceSizes[hi])), "–")
	return nil
}

// heapInUse is the heap in use after a collection.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
