package ca

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/phase-console/fleet/internal/state"
)

// brokenSuffix is put between a leaf's site folder name and the UTC time it was set aside.
const brokenSuffix = ".broken-"

// leafSite is the folder certmagic keeps the leaf for a.name in, under this root's issuer key:
// leaf/certificates/<issuer key>/<name>.
func (a *Authority) leafSite() (string, error) {
	return a.storage.filename(certmagic.StorageKeys.CertsSitePrefix((&issuer{a: a}).IssuerKey(), a.name))
}

// setAsideBrokenLeaf moves the stored leaf for a.name out of certmagic's way when it is there
// but cannot be used: one of its three files (.key, .crt, .json) is missing, the key and the
// certificate are not a pair, or one of them does not parse. certmagic stores a renewed leaf
// (a fresh key every time) as three separate atomic writes, so a process killed between them
// leaves exactly that, and certmagic would refuse it at every start (or, for a missing file,
// write over what is left). The folder is renamed, never deleted, to <site>.broken-<UTC time>
// beside it, and one warning names both folders; certmagic then issues a new leaf from the same
// root, which is not touched. A file that is too open or someone else's (F1), or that cannot be
// read, is not judged here: it stays an error. It holds certmagic's issue lock for the address
// meanwhile, so no renewal (of this process or another) is writing the folder while it is judged
// and moved.
func (a *Authority) setAsideBrokenLeaf(ctx context.Context) error {
	site, err := a.leafSite()
	if err != nil {
		return err
	}
	if _, err := os.Lstat(site); errors.Is(err, fs.ErrNotExist) {
		return nil // no leaf yet: certmagic makes one
	}
	lock := "issue_cert_" + a.name // certmagic's lock for obtaining or renewing a.name (Config.lockKey)
	if err := a.storage.Lock(ctx, lock); err != nil {
		return err
	}
	defer a.storage.Unlock(context.WithoutCancel(ctx), lock)

	why, err := a.leafProblem()
	if err != nil || why == "" {
		return err
	}
	moved, err := moveAside(site, time.Now().UTC())
	if err != nil {
		return fmt.Errorf("the leaf in %s is unusable (%s) and could not be moved aside: %w", site, why, err)
	}
	a.log.Warn("fleet.reach-leaf-set-aside", "addr", a.name, "folder", site, "moved_to", moved, "why", why,
		"root", FormatFingerprint(a.root.fp), "next", "a new leaf is issued from the same root; phones need nothing new")
	return nil
}

// leafProblem says why the stored leaf for a.name cannot be used, or "" when it can be (or when
// none of its files is there). An error is a file that could not be read or is refused by F1.
func (a *Authority) leafProblem() (string, error) {
	ik := (&issuer{a: a}).IssuerKey()
	keys := []string{
		certmagic.StorageKeys.SitePrivateKey(ik, a.name),
		certmagic.StorageKeys.SiteCert(ik, a.name),
		certmagic.StorageKeys.SiteMeta(ik, a.name),
	}
	var data [3][]byte
	var missing []string
	for i, k := range keys {
		name, err := a.storage.filename(k)
		if err != nil {
			return "", err
		}
		data[i], err = state.ReadPrivateFile(name)
		if errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, filepath.Base(name))
			continue
		}
		if err != nil {
			return "", err
		}
	}
	switch len(missing) {
	case 0:
	case len(keys):
		return "", nil
	default:
		return strings.Join(missing, " and ") + " missing", nil
	}
	if _, err := tls.X509KeyPair(data[1], data[0]); err != nil {
		return "key and certificate: " + err.Error(), nil
	}
	var meta certmagic.CertificateResource
	if err := json.Unmarshal(data[2], &meta); err != nil {
		return "metadata: " + err.Error(), nil
	}
	return "", nil
}

// moveAside renames dir to <dir>.broken-<UTC time> in the same folder (with -2, -3, … when that
// name is taken) and syncs the folder. It returns the new path.
func moveAside(dir string, now time.Time) (string, error) {
	base := dir + brokenSuffix + now.Format("20060102T150405Z")
	to := base
	for n := 2; ; n++ {
		if _, err := os.Lstat(to); errors.Is(err, fs.ErrNotExist) {
			break
		} else if err != nil {
			return "", err
		}
		to = fmt.Sprintf("%s-%d", base, n)
	}
	if err := os.Rename(dir, to); err != nil {
		return "", err
	}
	if d, err := os.Open(filepath.Dir(dir)); err == nil {
		d.Sync()
		d.Close()
	}
	return to, nil
}
