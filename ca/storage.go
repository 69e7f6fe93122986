package ca

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/phase-console/fleet/internal/state"
)

// storage is certmagic's Storage on internal/state: folders 0700, files 0600 written
// atomically, existing ones that are too open or someone else's refused (never re-permissioned),
// and locks that are flock(2)s on 0600 files under locks/ — the kernel drops them when the
// process ends, so a crash leaves no stale lock. certmagic.FileStorage is not used: it creates
// lock files 0644 and leaves an existing top folder as it is.
type storage struct {
	root string

	mu   sync.Mutex
	held map[string]*os.File // lock name -> the open, flocked lock file
}

var (
	_ certmagic.Storage   = (*storage)(nil)
	_ certmagic.TryLocker = (*storage)(nil)
)

// lockPoll is how often Lock tries again while another holds the lock.
const lockPoll = 100 * time.Millisecond

func newStorage(root string) (*storage, error) {
	if err := state.EnsureDir(root); err != nil {
		return nil, err
	}
	return &storage{root: root, held: make(map[string]*os.File)}, nil
}

// filename maps a key ("certificates/x/y.crt") to a path below root; a key that would leave
// root is an error.
func (s *storage) filename(key string) (string, error) {
	rel := filepath.FromSlash(key)
	if key == "" || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("ca: storage key %q is not a path inside %s", key, s.root)
	}
	return filepath.Join(s.root, rel), nil
}

// ensureParents makes every folder between root and the file at rel 0700, one level at a time,
// so that each is checked (F1) and none depends on the umask.
func (s *storage) ensureParents(rel string) error {
	dir := s.root
	parts := strings.Split(filepath.Dir(rel), string(filepath.Separator))
	for _, p := range parts {
		if p == "." || p == "" {
			continue
		}
		dir = filepath.Join(dir, p)
		if err := state.EnsureDir(dir); err != nil {
			return err
		}
	}
	return nil
}

// Store writes value at key atomically, mode 0600.
func (s *storage) Store(_ context.Context, key string, value []byte) error {
	name, err := s.filename(key)
	if err != nil {
		return err
	}
	if err := s.ensureParents(filepath.FromSlash(key)); err != nil {
		return err
	}
	return state.WritePrivateFile(name, value)
}

// Load reads key; a missing key is an error matching fs.ErrNotExist, a file that is too open
// is refused.
func (s *storage) Load(_ context.Context, key string) ([]byte, error) {
	name, err := s.filename(key)
	if err != nil {
		return nil, err
	}
	return state.ReadPrivateFile(name)
}

// Delete removes key and everything below it; a missing key is not an error.
func (s *storage) Delete(_ context.Context, key string) error {
	name, err := s.filename(key)
	if err != nil {
		return err
	}
	return os.RemoveAll(name)
}

// Exists reports whether key exists, as a file or a folder.
func (s *storage) Exists(_ context.Context, key string) bool {
	name, err := s.filename(key)
	if err != nil {
		return false
	}
	_, err = os.Lstat(name)
	return err == nil
}

// List returns the keys below prefix (all levels when recursive).
func (s *storage) List(ctx context.Context, prefix string, recursive bool) ([]string, error) {
	top, err := s.filename(prefix)
	if err != nil {
		return nil, err
	}
	var keys []string
	err = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == top {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(top, p)
		if err != nil {
			return err
		}
		keys = append(keys, path.Join(prefix, filepath.ToSlash(rel)))
		if !recursive && d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	})
	return keys, err
}

// Stat describes key.
func (s *storage) Stat(_ context.Context, key string) (certmagic.KeyInfo, error) {
	name, err := s.filename(key)
	if err != nil {
		return certmagic.KeyInfo{}, err
	}
	st, err := os.Lstat(name)
	if err != nil {
		return certmagic.KeyInfo{}, err
	}
	return certmagic.KeyInfo{Key: key, Modified: st.ModTime(), Size: st.Size(), IsTerminal: !st.IsDir()}, nil
}

// Lock takes the named lock, waiting (and honouring ctx) while another holds it.
func (s *storage) Lock(ctx context.Context, name string) error {
	for {
		ok, err := s.TryLock(ctx, name)
		if ok || err != nil {
			return err
		}
		t := time.NewTimer(lockPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// TryLock takes the named lock if it is free. The lock file is created 0600 and checked like
// every other file; it stays after Unlock (removing it would let two holders lock two inodes).
func (s *storage) TryLock(_ context.Context, name string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.held[name]; ok {
		return false, nil
	}
	dir := filepath.Join(s.root, "locks")
	if err := state.EnsureDir(dir); err != nil {
		return false, err
	}
	p := filepath.Join(dir, certmagic.StorageKeys.Safe(name)+".lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return false, fmt.Errorf("lock %s: %w", p, err)
	}
	if err := state.CheckFile(p); err != nil {
		f.Close()
		return false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return false, fmt.Errorf("lock %s: %w", p, err)
	}
	s.held[name] = f
	return true, nil
}

// Unlock releases the named lock.
func (s *storage) Unlock(_ context.Context, name string) error {
	s.mu.Lock()
	f, ok := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("ca: unlock of %q, which is not held", name)
	}
	return f.Close() // closing the last descriptor drops the flock
}

func (s *storage) String() string { return "fleet-ca-storage:" + s.root }

// checkTree applies F1 to dir and everything below it: every folder CheckDir, every file
// CheckFile; a symlink or anything else is refused. It changes nothing.
func checkTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return state.CheckDir(p)
		}
		return state.CheckFile(p)
	})
}
