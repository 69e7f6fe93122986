package ca

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/phase-console/fleet/internal/state"
)

// ErrNoRoot says that the CA's folder holds no root for the address yet: the door has not been
// opened there (Open makes the root).
var ErrNoRoot = errors.New("ca: no root for this address yet")

// ReadFingerprint returns the fingerprint, formatted as Authority.Fingerprint formats it, of the
// root that Open would choose in dir for ip now: the newest usable root whose name constraints
// permit ip. It only reads: nothing is created, renewed or re-permissioned, so a command running
// beside the door (fleet reach pair) can show the fingerprint without racing the door. Without
// such a root, or without the folder, the error is ErrNoRoot. A folder or file that is too open,
// or a root that does not parse, is an error naming it, as at Open.
func ReadFingerprint(dir string, ip netip.Addr) (string, error) {
	ip = ip.Unmap().WithZone("")
	rootsPath := filepath.Join(dir, rootsDir)
	for _, d := range []string{dir, rootsPath} {
		if err := state.CheckDir(d); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", ErrNoRoot
			}
			return "", fmt.Errorf("ca: %w", err)
		}
	}
	roots, err := loadRoots(rootsPath)
	if err != nil {
		return "", fmt.Errorf("ca: %w", err)
	}
	now := time.Now()
	var best *root
	for _, r := range roots { // as chooseRoot chooses
		if r.covers(ip) && r.usable(now) && (best == nil || r.cert.NotBefore.After(best.cert.NotBefore)) {
			best = r
		}
	}
	if best == nil {
		return "", ErrNoRoot
	}
	return FormatFingerprint(best.fp), nil
}
