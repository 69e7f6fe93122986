package pairing

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/internal/state"
)

// LastSeenInterval is how often, at most, a device's last-seen time and address are written to
// the register; between writes they are kept in memory.
const LastSeenInterval = 30 * time.Second

// RefreshInterval is how often `fleet serve` should Watch the register: a revocation made by
// another process ends the device's open streams within it and one reload of the file (SPEC R8:
// at once; P1: within 1 s, with 10,000 devices, whose reload takes about a tenth of a second —
// bench/scale). A request is refused sooner: each one's check asks the file loaded (one fstat).
const RefreshInterval = 500 * time.Millisecond

// CredentialBytes is how many random bytes a device credential carries. It is given to the
// device base64url-encoded without padding (43 characters), as a cookie value.
const CredentialBytes = 32

// credentialLen is the length of a credential as the device sends it: CredentialBytes in
// base64url without padding.
const credentialLen = (CredentialBytes*8 + 5) / 6

// maxNameRunes bounds a device's name.
const maxNameRunes = 64

// ErrNoSuchDevice says that no registered device has that id6.
var ErrNoSuchDevice = errors.New("no such device")

// A Device is a paired device as the register knows it. It never holds the credential.
type Device struct {
	ID6      string    // six characters [a-z2-7], unique
	Name     string    // as given at pairing, cleaned
	Slug     string    // [a-z0-9-]{1,32}, from Name
	Created  time.Time //
	LastSeen time.Time // zero until first seen
	LastAddr string    // the address it was last seen from, as the caller gave it
	// Consoles is what the device may open (SPEC G1), given at pairing (`fleet reach pair
	// --consoles`). Never nil for a device of a register; a nil Grant allows nothing.
	Consoles *access.Grant

	login string // Login, made once when the register loads the device: asked every request
}

// Login is how the device is asserted onward (SPEC R9): device:<slug>#<id6>, a shape no person's
// login can have.
func (d Device) Login() string {
	if d.login != "" {
		return d.login
	}
	return "device:" + d.Slug + "#" + d.ID6
}

type deviceRecord struct {
	ID6      string    `json:"id6"`
	Name     string    `json:"name"`
	Slug     string    `json:"slug"`
	SHA256   string    `json:"credential_sha256"` // hex
	Created  time.Time `json:"created"`
	LastSeen time.Time `json:"last_seen,omitzero"`
	LastAddr string    `json:"last_addr,omitempty"`
	// Consoles are the patterns of what the device may open (package access); absent (a
	// device paired before devices had lists) is every console, as the default of pairing is.
	Consoles *[]string `json:"consoles,omitempty"`
}

type devicesFile struct {
	Version int            `json:"format"` // the file's format: fileVersion
	Devices []deviceRecord `json:"devices"`
	// Revoked keeps the id6 of every revoked device, so that an id6 — and the login a console may
	// have remembered — is never given to another device.
	Revoked []string `json:"revoked_id6,omitempty"`

	read int // the format of the file it was read from (pairingFile)
}

func (f *devicesFile) version() int       { return f.Version }
func (f *devicesFile) readFormat() *int   { return &f.read }
func (f *devicesFile) legacy() legacyFile { return &devicesFileV1{} }
func (f *devicesFile) fromLegacy(l legacyFile) {
	old := l.(*devicesFileV1)
	f.Version, f.Devices, f.Revoked = fileVersion, old.Devices, old.Revoked
}

// devicesFileV1 is devices.json of format 1, before "format".
type devicesFileV1 struct {
	Version int            `json:"version"` // 1
	Devices []deviceRecord `json:"devices"`
	Revoked []string       `json:"revoked_id6,omitempty"`
}

func (f *devicesFileV1) version() int { return f.Version }

func (r deviceRecord) device() Device {
	g, err := consolesOf(r.Consoles)
	if err != nil {
		g = access.Nothing // not reached: readDevices refuses such a file
	}
	d := Device{ID6: r.ID6, Name: r.Name, Slug: r.Slug, Created: r.Created, LastSeen: r.LastSeen, LastAddr: r.LastAddr, Consoles: g}
	d.login = d.Login()
	return d
}

// consolesOf is the Grant of a stored list of patterns: every console when there is none.
func consolesOf(list *[]string) (*access.Grant, error) {
	if list == nil {
		return access.Everything, nil
	}
	return access.NewGrant(*list)
}

// patternsOf is how a Grant is stored: its patterns, never absent (nil opens nothing).
func patternsOf(g *access.Grant) *[]string {
	list := g.Patterns()
	if list == nil {
		list = []string{}
	}
	return &list
}

// RegisterDeviceFor adds a device called name, which may open consoles (nil: none), to dir's
// register and returns it with its credential: CredentialBytes from crypto/rand, base64url
// without padding. Only the credential's SHA-256 is stored. The device gets a fresh id6, never
// used before in this register.
func RegisterDeviceFor(dir, name string, consoles *access.Grant, now time.Time) (Device, string, error) {
	name = cleanName(name)
	if name == "" {
		name = "device"
	}
	raw := make([]byte, CredentialBytes)
	if _, err := rand.Read(raw); err != nil {
		return Device{}, "", err
	}
	cred := base64.RawURLEncoding.EncodeToString(raw)
	sum := sha256.Sum256([]byte(cred))
	path := filepath.Join(dir, DevicesFile)
	var d Device
	err := withLock(dir, func() error {
		f, err := readDevices(path)
		if err != nil {
			return err
		}
		id, err := newID6(f)
		if err != nil {
			return err
		}
		rec := deviceRecord{ID6: id, Name: name, Slug: Slug(name), SHA256: hex.EncodeToString(sum[:]), Created: now.UTC(),
			Consoles: patternsOf(consoles)}
		f.Devices = append(f.Devices, rec)
		if err := writeJSON(path, f); err != nil {
			return err
		}
		d = rec.device()
		return nil
	})
	if err != nil {
		return Device{}, "", err
	}
	return d, cred, nil
}

// RevokeDevice removes the device id6 from dir's register; its credential is refused from then on
// by every Register that refreshes. ErrNoSuchDevice if there is none.
func RevokeDevice(dir, id6 string) error {
	path := filepath.Join(dir, DevicesFile)
	return withLock(dir, func() error {
		f, err := readDevices(path)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(f.Devices, func(r deviceRecord) bool { return r.ID6 == id6 })
		if i < 0 {
			return fmt.Errorf("%w: %q", ErrNoSuchDevice, id6)
		}
		f.Devices = slices.Delete(f.Devices, i, i+1)
		f.Revoked = append(f.Revoked, id6)
		return writeJSON(path, f)
	})
}

// ListDevices returns dir's registered devices, oldest first (last seen as last written, up to
// LastSeenInterval behind what a running server knows).
func ListDevices(dir string) ([]Device, error) {
	if err := state.CheckDir(dir); err != nil {
		if notExist(err) {
			return nil, nil // nothing paired yet
		}
		return nil, err
	}
	f, err := readDevices(filepath.Join(dir, DevicesFile))
	if err != nil {
		return nil, err
	}
	out := make([]Device, 0, len(f.Devices))
	for _, r := range f.Devices {
		out = append(out, r.device())
	}
	slices.SortStableFunc(out, func(a, b Device) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// readDevices reads and checks devices.json; a missing file is an empty register.
func readDevices(path string) (*devicesFile, error) {
	data, err := state.ReadPrivateFile(path)
	return parseDevices(path, data, err)
}

// parseDevices is readDevices' judgement of data, read from path with readErr.
func parseDevices(path string, data []byte, readErr error) (*devicesFile, error) {
	f := &devicesFile{Version: fileVersion}
	err := readErr
	if err == nil {
		err = decodeJSON(path, data, f)
	}
	if err != nil && !notExist(err) {
		return nil, err
	}
	ids := map[string]bool{}
	sums := map[string]bool{}
	for _, r := range f.Devices {
		switch {
		case !validID6(r.ID6):
			return nil, &ParseError{Path: path, Err: fmt.Errorf("device id %q is not six of [a-z2-7]", r.ID6)}
		case ids[r.ID6]:
			return nil, &ParseError{Path: path, Err: fmt.Errorf("device id %q is there twice", r.ID6)}
		case !validSlug(r.Slug):
			return nil, &ParseError{Path: path, Err: fmt.Errorf("device %s: slug %q is not [a-z0-9-]{1,32}", r.ID6, r.Slug)}
		case !validHexSum(r.SHA256):
			return nil, &ParseError{Path: path, Err: fmt.Errorf("device %s: credential_sha256 is not 64 hex digits", r.ID6)}
		case sums[strings.ToLower(r.SHA256)]: // one credential, however its hex is spelled
			return nil, &ParseError{Path: path, Err: fmt.Errorf("device %s: credential shared with another device", r.ID6)}
		}
		if _, err := consolesOf(r.Consoles); err != nil {
			return nil, &ParseError{Path: path, Err: fmt.Errorf("device %s: consoles: %v", r.ID6, err)}
		}
		ids[r.ID6], sums[strings.ToLower(r.SHA256)] = true, true
	}
	return f, nil
}

// Slug makes a device's slug from its name: lower case, every run of characters outside [a-z0-9]
// one dash, no dash at either end, at most 32 characters; "device" when nothing is left.
func Slug(name string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(name) {
		if ('a' <= c && c <= 'z') || ('0' <= c && c <= '9') {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(c)
			if b.Len() >= 32 {
				break
			}
		} else {
			dash = true
		}
	}
	s := strings.TrimRight(b.String()[:min(b.Len(), 32)], "-")
	if s == "" {
		return "device"
	}
	return s
}

// cleanName keeps a name printable: invalid UTF-8, control and format characters (bidi overrides,
// zero-width joiners, which could make one name pass for another) become spaces, spaces
// at the ends are trimmed, and it is cut at maxNameRunes characters.
func cleanName(name string) string {
	var b strings.Builder
	n := 0
	for _, c := range strings.ToValidUTF8(name, string(utf8.RuneError)) {
		if n == maxNameRunes {
			break
		}
		if unicode.IsControl(c) || unicode.Is(unicode.Cf, c) || c == utf8.RuneError {
			c = ' '
		}
		b.WriteRune(c)
		n++
	}
	return strings.TrimSpace(b.String())
}

const id6Alphabet = "abcdefghijklmnopqrstuvwxyz234567"

// newID6 draws six characters of [a-z2-7] (5 bits of a random byte each: unbiased) until they
// name neither a registered device nor a revoked one.
func newID6(f *devicesFile) (string, error) {
	used := map[string]bool{}
	for _, r := range f.Devices {
		used[r.ID6] = true
	}
	for _, id := range f.Revoked {
		used[id] = true
	}
	b := make([]byte, 6)
	for range 100 {
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		for i := range b {
			b[i] = id6Alphabet[b[i]&31]
		}
		if !used[string(b)] {
			return string(b), nil
		}
	}
	return "", errors.New("no free device id") // 2^30 ids: not in this universe
}

func validID6(s string) bool {
	if len(s) != 6 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune(id6Alphabet, rune(s[i])) {
			return false
		}
	}
	return true
}

func validSlug(s string) bool {
	if len(s) < 1 || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z') && !('0' <= c && c <= '9') && c != '-' {
			return false
		}
	}
	return true
}

func validHexSum(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// A Register keeps dir's device register in memory for a server: it answers Authenticate from
// memory, follows the file (each Authenticate: one fstat of the file it loaded, kept open, when
// nothing changed), and tells subscribers when a device goes away — revoked by this process or
// any other.
//
// While the file cannot be read or does not parse, no device is believed (fail closed), and every
// device it believed is reported as revoked; it is believed again once the file is good.
type Register struct {
	dir, path string

	loadMu sync.Mutex // one reload at a time
	mu     sync.Mutex // guards what follows
	stamp  stamp      // of the file as last loaded
	file   *os.File   // the file as last loaded, kept open for Authenticate's check; nil: none
	fd     int        // file's descriptor (refreshForRequest)
	err    error      // of the last load
	byHash map[[sha256.Size]byte]*liveDevice
	byID   map[string]*liveDevice
	subs   []func(id6 string)
	// seenDue: a device's last seen is due to be written; seenWriting: the writer runs. One
	// writer at a time, off every request's path (Authenticate starts writeLastSeenWhileDue).
	seenDue, seenWriting bool

	seenWrites sync.WaitGroup // the writer of last seen, while it runs (WaitWrites)
}

type liveDevice struct {
	Device
	sum       [sha256.Size]byte
	lastWrite time.Time // when its last seen was last written (or tried)
}

// stamp identifies one version of the file: every write renames a new file over it, so the inode
// changes with each; mode is there so that a file made too open is read again, and refused. The
// same stamp comes from the path's lstat and from the fstat of the file kept open: a file
// renamed over the one loaded unlinks it (its link count falls and its change time moves), so
// the open file's fstat tells of it without a lookup of the path.
type stamp struct {
	exists bool
	mod    int64
	size   int64
	ino    uint64
	nlink  uint64
	ctime  int64
	mode   uint32 // st_mode: type and permissions
}

// OpenRegister makes the folder if needed (0700) and loads its register. A register file that is
// too open or does not parse is an error naming it, and is left as it is.
func OpenRegister(dir string) (*Register, error) {
	if err := state.EnsureDir(dir); err != nil {
		return nil, err
	}
	r := &Register{dir: dir, path: filepath.Join(dir, DevicesFile)}
	if err := r.reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// OnRevoke subscribes fn to revocations: it is called with the id6 of each device that leaves the
// register, once, from the goroutine that noticed (Refresh, Authenticate, Revoke, Watch). fn must
// not block; it may call the Register.
func (r *Register) OnRevoke(fn func(id6 string)) {
	r.mu.Lock()
	r.subs = append(r.subs, fn)
	r.mu.Unlock()
}

// Refresh reloads the register if its file changed since the last load (one lstat otherwise),
// or if the last load failed. It returns the load's error.
//
// Of many requests that find the file changed at once, one reloads it; the others wait for that
// load and use it, rather than each reading the whole file again.
func (r *Register) Refresh() error {
	if r.fresh(statFile(r.path)) {
		return nil
	}
	gone, subs, err := r.load(true)
	r.tell(gone, subs)
	return err
}

// refreshForRequest is Refresh as each Authenticate makes it: the fstat of the file loaded, kept
// open, without a lookup of its path (about twice its cost, more on a busy machine: P2), and
// Refresh only when that fstat says the file may have changed. It sees every write that a lookup
// would see at once — every writer renames a new file over the old one (WriteFileAtomic) — but
// one: the file moved away whole, and another put in its place, on a file system that leaves a
// renamed file's change time alone. Watch's Refresh sees that within RefreshInterval.
func (r *Register) refreshForRequest() {
	r.mu.Lock()
	fd, want, good := r.fd, r.stamp, r.err == nil && r.file != nil
	r.mu.Unlock()
	if good {
		// The descriptor as a number, without os.File's bookkeeping: a reload may close it
		// meanwhile, and its number then names another file or none, whose stamp is not want
		// (another inode) or is an error. Either way Refresh decides.
		var st syscall.Stat_t
		if syscall.Fstat(fd, &st) == nil && stampOfSys(&st) == want {
			return
		}
	}
	r.Refresh()
}

// fresh reports whether st is the file as last loaded, and that load succeeded.
func (r *Register) fresh(st stamp) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return st == r.stamp && r.err == nil
}

// Watch calls Refresh every interval (RefreshInterval for `fleet serve`) until stop is closed, so that
// a device revoked by another process is dropped, and its subscribers told, within an interval.
func (r *Register) Watch(stop <-chan struct{}, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			r.Refresh()
		}
	}
}

// Err is the error of the last load, if any: while it is set no device is believed.
func (r *Register) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Devices returns the devices believed now, oldest first, with last seen as known in memory.
func (r *Register) Devices() []Device {
	r.mu.Lock()
	out := make([]Device, 0, len(r.byID))
	for _, d := range r.byID {
		out = append(out, d.Device)
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Device) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID6, b.ID6)
	})
	return out
}

// AddFor registers a device that may open consoles (RegisterDeviceFor) and loads the result.
// Once it returns without error the device is in the file; should the reload fail, the Register
// believes nobody (see Err) until the file is good again.
func (r *Register) AddFor(name string, consoles *access.Grant, now time.Time) (Device, string, error) {
	d, cred, err := RegisterDeviceFor(r.dir, name, consoles, now)
	if err != nil {
		return Device{}, "", err
	}
	r.Refresh()
	return d, cred, nil
}

// Revoke revokes a device (RevokeDevice) and loads the result, so that the subscribers are told
// before it returns (if the reload fails, every device is dropped and reported, this one too).
func (r *Register) Revoke(id6 string) error {
	if err := RevokeDevice(r.dir, id6); err != nil {
		return err
	}
	r.Refresh()
	return nil
}

// Authenticate returns the device whose credential is cred, after a Refresh (so a revocation
// written by another process is seen at once). It records now and addr as the device's last seen
// in memory and writes them to the file at most every LastSeenInterval per device, best effort
// and in the background: a request never waits for the file (which holds every device), and a
// write that fails, or finds the folder locked, waits for the next interval.
//
// The credential is looked up by its SHA-256 in a map, not compared in constant time: the time a
// lookup takes can only tell an attacker about the hash of their own guess, and a hash of a
// 32-byte random secret gives no way back to a credential that matches.
func (r *Register) Authenticate(cred string, now time.Time, addr string) (Device, bool) {
	if len(cred) != credentialLen {
		return Device{}, false
	}
	r.refreshForRequest()
	var buf [credentialLen]byte // the credential's bytes, on the stack: no allocation a request
	sum := sha256.Sum256(buf[:copy(buf[:], cred)])
	r.mu.Lock()
	d := r.byHash[sum]
	if d == nil {
		r.mu.Unlock()
		return Device{}, false
	}
	d.LastSeen, d.LastAddr = now, addr
	due := d.lastWrite.IsZero() || now.Sub(d.lastWrite) >= LastSeenInterval || now.Before(d.lastWrite)
	if due {
		d.lastWrite = now
	}
	dev := d.Device
	start := due && !r.seenWriting
	if due {
		r.seenDue = true
	}
	if start {
		r.seenWriting = true
		r.seenWrites.Add(1)
	}
	r.mu.Unlock()
	if start {
		go r.writeLastSeenWhileDue()
	}
	return dev, true
}

// WaitWrites waits until no write of last seen (Authenticate's, in the background) is running.
// A server calls it as it stops, so that nothing is written to the folder after.
func (r *Register) WaitWrites() { r.seenWrites.Wait() }

// writeLastSeenWhileDue writes last seen until no write is due: a device that became due while
// the file was being written is written by the next pass, by this same writer.
func (r *Register) writeLastSeenWhileDue() {
	defer r.seenWrites.Done()
	for {
		r.mu.Lock()
		if !r.seenDue {
			r.seenWriting = false
			r.mu.Unlock()
			return
		}
		r.seenDue = false
		r.mu.Unlock()
		r.writeLastSeen()
	}
}

// writeLastSeen writes what memory knows of last seen into the file, if the lock is free now.
// When the file it rewrote is the one memory holds, the new file differs from memory by nothing
// (its last seen is memory's): it is taken as loaded, not read back.
func (r *Register) writeLastSeen() {
	reload := true
	ran, _ := tryLock(r.dir, func() error {
		before := statFile(r.path) // under the lock: every writer of the file holds it
		f, err := readDevices(r.path)
		if err != nil {
			return err
		}
		changed := false
		r.mu.Lock()
		loaded := before == r.stamp && r.err == nil
		for i := range f.Devices {
			rec := &f.Devices[i]
			if d := r.byID[rec.ID6]; d != nil && d.LastSeen.After(rec.LastSeen) {
				rec.LastSeen, rec.LastAddr = d.LastSeen.UTC(), d.LastAddr
				changed = true
			}
		}
		r.mu.Unlock()
		if !changed {
			reload = !loaded
			return nil
		}
		if err := writeJSON(r.path, f); err != nil {
			return err
		}
		if loaded {
			file, after, err := openFile(r.path) // under the lock: the file just written
			if err != nil {
				return err
			}
			r.mu.Lock()
			if r.stamp == before && r.err == nil {
				r.stamp, reload = after, false
				r.keep(file)
				file = nil
			}
			r.mu.Unlock()
			closeFile(file)
		}
		return nil
	})
	if ran && reload {
		r.Refresh()
	}
}

// reload reads the file and swaps it in, keeping what memory knows of last seen, then tells the
// subscribers of the devices that are gone (after letting go of the locks: a subscriber may call
// the Register).
func (r *Register) reload() error {
	gone, subs, err := r.load(false)
	r.tell(gone, subs)
	return err
}

// tell tells subs of the devices gone.
func (r *Register) tell(gone []string, subs []func(string)) {
	for _, id := range gone {
		for _, fn := range subs {
			fn(id)
		}
	}
}

// load reads the file and swaps it in; ifStale, only when the file is not the one loaded already
// (another goroutine may have loaded it while this one waited for loadMu).
func (r *Register) load(ifStale bool) (gone []string, subs []func(string), err error) {
	r.loadMu.Lock()
	defer r.loadMu.Unlock()
	file, st, err := openFile(r.path)
	if err == nil && ifStale && r.fresh(st) {
		closeFile(file)
		return nil, nil, nil
	}
	var data []byte
	if err == nil && file != nil {
		data, err = io.ReadAll(file)
	} else if err == nil {
		err = fs.ErrNotExist // no file: an empty register
	}
	f, err := parseDevices(r.path, data, err)
	byHash := map[[sha256.Size]byte]*liveDevice{}
	byID := map[string]*liveDevice{}
	if err == nil {
		for _, rec := range f.Devices {
			d := &liveDevice{Device: rec.device()}
			hex.Decode(d.sum[:], []byte(rec.SHA256))
			byHash[d.sum], byID[d.ID6] = d, d
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, old := range r.byID {
		d := byID[id]
		if d == nil || d.sum != old.sum {
			gone = append(gone, id)
			continue
		}
		if old.LastSeen.After(d.LastSeen) {
			d.LastSeen, d.LastAddr = old.LastSeen, old.LastAddr
		}
		d.lastWrite = old.lastWrite
	}
	r.byHash, r.byID, r.err = byHash, byID, err
	if err == nil {
		r.stamp = st
		r.keep(file)
	} else {
		r.stamp = stamp{}
		r.keep(nil)
		closeFile(file)
	}
	slices.Sort(gone)
	return gone, slices.Clone(r.subs), err
}

// statFile stamps path; a missing file has the zero stamp with exists false, like an error.
func statFile(path string) stamp {
	st, err := os.Lstat(path)
	if err != nil {
		return stamp{}
	}
	return stampOf(st)
}

// stampOf is the stamp of a file's lstat or fstat.
func stampOf(info fs.FileInfo) stamp {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return stampOfSys(st)
	}
	return stamp{exists: true, mod: info.ModTime().UnixNano(), size: info.Size(), mode: uint32(info.Mode())}
}

// keep makes f the file kept open for refreshForRequest (nil: none), closing the one it
// replaces. r.mu is held.
func (r *Register) keep(f *os.File) {
	old := r.file
	r.file, r.fd = f, -1
	if f != nil {
		r.fd = int(f.Fd())
	}
	closeFile(old)
}

// openFile opens the private file at path as it is now (state.OpenPrivateFile), with its stamp;
// a missing file is nil, the zero stamp and no error.
func openFile(path string) (*os.File, stamp, error) {
	f, info, err := state.OpenPrivateFile(path)
	if notExist(err) {
		return nil, stamp{}, nil
	}
	if err != nil {
		return nil, stamp{}, err
	}
	return f, stampOf(info), nil
}

func closeFile(f *os.File) {
	if f != nil {
		f.Close()
	}
}
