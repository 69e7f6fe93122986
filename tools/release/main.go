// Command release packs the binaries that scripts/release built into fleet's release files
// (SPEC O4): a tarball per platform, a .deb and an .rpm per Linux architecture, and SHA256SUMS,
// all in -dist. The .deb and the .rpm are made with nFPM used as a library, not by hand.
//
// Everything it writes is a function of its inputs alone, so that two releases of one commit are
// byte-identical: every file's time is -mtime (scripts/release passes the commit's time), every
// owner is root (uid and gid 0), entries are in a fixed order, gzip headers carry no name or
// time, and the RPM's build host is a constant.
//
// It is its own Go module, so that nFPM and what it needs (git, PGP, compression libraries)
// never enter the module of the fleet binary, whose dependencies every user builds and trusts.
package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the "deb" packager
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the "rpm" packager
)

// Where the packages install things.
const (
	binDest  = "/usr/bin/fleet"
	unitDir  = "/usr/lib/systemd/user" // systemd's user units shipped by packages (systemd.unit(5))
	docDir   = "/usr/share/doc/fleet"
	homepage = "https://github.com/phase-console/fleet"
)

func main() {
	version := flag.String("version", "", "the release `VERSION`, v1.2.3")
	mtime := flag.Int64("mtime", 0, "the time of every file, in `seconds` since 1970 (the commit's time)")
	root := flag.String("root", ".", "the repository's `DIR` (README.md, docs/, deploy/)")
	bins := flag.String("bins", "", "`DIR` holding <os>_<arch>/fleet for each platform")
	dist := flag.String("dist", "dist", "the `DIR` to write the release files into")
	platforms := flag.String("platforms", "linux/amd64 linux/arm64 darwin/amd64 darwin/arm64", "the `PLATFORMS` to pack, os/arch separated by spaces")
	flag.Parse()
	if err := run(*version, time.Unix(*mtime, 0).UTC(), *root, *bins, *dist, strings.Fields(*platforms)); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

var versionRE = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$`)

func run(version string, mtime time.Time, root, bins, dist string, platforms []string) error {
	if !versionRE.MatchString(version) {
		return fmt.Errorf("version %q: want v<major>.<minor>.<patch>, optionally -<pre-release>", version)
	}
	if mtime.Unix() <= 0 {
		return errors.New("-mtime: want the commit's time, in seconds since 1970")
	}
	if err := os.MkdirAll(dist, 0o755); err != nil {
		return err
	}
	extras, err := extraFiles(root)
	if err != nil {
		return err
	}
	var written []string
	for _, p := range platforms {
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok {
			return fmt.Errorf("platform %q: want os/arch", p)
		}
		bin := filepath.Join(bins, goos+"_"+goarch, "fleet")
		if _, err := os.Stat(bin); err != nil {
			return err
		}
		name := fmt.Sprintf("fleet_%s_%s_%s.tar.gz", strings.TrimPrefix(version, "v"), goos, goarch)
		if err := writeTarball(filepath.Join(dist, name), strings.TrimSuffix(name, ".tar.gz"), bin, root, extras, mtime); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		written = append(written, name)
		if goos != "linux" {
			continue
		}
		pkgs, err := writePackages(dist, version, goarch, bin, root, mtime)
		if err != nil {
			return err
		}
		written = append(written, pkgs...)
	}
	return writeSums(dist, written)
}

// extraFiles are the files beside the binary in a tarball, relative to root, in a fixed order:
// the README, the user docs, and the service files of deploy/.
func extraFiles(root string) ([]string, error) {
	out := []string{"README.md"}
	for _, pattern := range []string{"docs/*.md", "deploy/systemd/*", "deploy/launchd/*", "deploy/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return nil, err
		}
		slices.Sort(m)
		for _, f := range m {
			rel, _ := filepath.Rel(root, f)
			out = append(out, filepath.ToSlash(rel))
		}
	}
	return out, nil
}

// writeTarball writes dest: top/fleet (0755) and top/<extra> (0644), owned by root, every
// entry's time mtime, folders before what they hold, in a fixed order.
func writeTarball(dest, top, bin, root string, extras []string, mtime time.Time) error {
	f, err := os.Create(dest)
	if err != nil {
		return err
	}
	defer f.Close()
	zw, err := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	dirs := map[string]bool{}
	addDir := func(dir string) error {
		var chain []string
		for d := dir; d != "." && !dirs[d]; d = path.Dir(d) {
			chain = append([]string{d}, chain...)
		}
		for _, d := range chain {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime, Format: tar.FormatUSTAR}); err != nil {
				return err
			}
		}
		return nil
	}
	addFile := func(name, src string, mode int64) error {
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := addDir(path.Dir(name)); err != nil {
			return err
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	}
	if err := addFile(top+"/fleet", bin, 0o755); err != nil {
		return err
	}
	for _, e := range extras {
		if err := addFile(top+"/"+e, filepath.Join(root, filepath.FromSlash(e)), 0o644); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// writePackages writes the .deb and the .rpm for one Linux architecture and returns their names.
// They install the binary as /usr/bin/fleet, the systemd user units of deploy/systemd (the
// service, and the socket unit when there is one) in /usr/lib/systemd/user with their ExecStart
// pointed at /usr/bin/fleet, and the README and docs in /usr/share/doc/fleet.
func writePackages(dist, version, goarch, bin, root string, mtime time.Time) ([]string, error) {
	stage, err := os.MkdirTemp("", "fleet-release-units-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)
	type entry struct {
		src, dst string
		mode     fs.FileMode
	}
	entries := []entry{{bin, binDest, 0o755}}
	units, _ := filepath.Glob(filepath.Join(root, "deploy", "systemd", "fleet.*"))
	slices.Sort(units)
	for _, u := range units {
		base := filepath.Base(u)
		if base != "fleet.service" && base != "fleet.socket" {
			continue
		}
		text, err := os.ReadFile(u)
		if err != nil {
			return nil, err
		}
		packaged, err := packagedUnit(string(text))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", u, err)
		}
		staged := filepath.Join(stage, base)
		if err := os.WriteFile(staged, []byte(packaged), 0o644); err != nil {
			return nil, err
		}
		entries = append(entries, entry{staged, unitDir + "/" + base, 0o644})
	}
	if len(entries) == 1 {
		return nil, errors.New("deploy/systemd holds no fleet.service")
	}
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	slices.Sort(docs)
	for _, d := range append([]string{filepath.Join(root, "README.md")}, docs...) {
		entries = append(entries, entry{d, docDir + "/" + filepath.Base(d), 0o644})
	}
	contents := func() files.Contents {
		var c files.Contents
		for _, e := range entries {
			c = append(c, &files.Content{Source: e.src, Destination: e.dst, Type: files.TypeFile,
				FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: e.mode, MTime: mtime}})
		}
		return c
	}
	var names []string
	for _, format := range []string{"deb", "rpm"} {
		p, err := nfpm.Get(format)
		if err != nil {
			return nil, err
		}
		// A fresh Info for each format: packaging prepares (changes) the contents it is given.
		info := nfpm.WithDefaults(&nfpm.Info{
			Name:        "fleet",
			Arch:        goarch,
			Platform:    "linux",
			Version:     version,
			Section:     "net",
			Priority:    "optional",
			Maintainer:  "fleet maintainers", // no address of its own: the homepage is where to reach them
			Description: "one front door for the consoles on this machine, published by Tailscale Serve",
			Homepage:    homepage,
			MTime:       mtime,
			Overridables: nfpm.Overridables{
				Contents: contents(),
				RPM:      nfpm.RPM{BuildHost: "fleet-release", Summary: "one front door for the consoles on this machine"},
			},
		})
		name := p.ConventionalFileName(info)
		f, err := os.Create(filepath.Join(dist, name))
		if err != nil {
			return nil, err
		}
		if err := p.Package(info, f); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}

// goBinRE is the binary a unit of deploy/systemd names for a `go install` (%h/go/bin/fleet).
var goBinRE = regexp.MustCompile(`(^|[\s=])%h/go/bin/fleet\b`)

// packagedUnit is a unit of deploy/systemd as the packages install it: every setting that runs
// %h/go/bin/fleet runs /usr/bin/fleet instead (comments are left as they are). A service whose
// ExecStart then does not run /usr/bin/fleet is an error, so that a change of the unit is
// noticed here rather than shipped broken.
func packagedUnit(text string) (string, error) {
	lines := strings.Split(text, "\n")
	service := false
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "#") || strings.HasPrefix(t, ";") {
			continue
		}
		if t == "[Service]" {
			service = true
		}
		lines[i] = goBinRE.ReplaceAllString(l, "${1}"+binDest)
	}
	out := strings.Join(lines, "\n")
	if service && !regexp.MustCompile(`(?m)^ExecStart=`+regexp.QuoteMeta(binDest)+`\s`).MatchString(out) {
		return "", errors.New("the service's ExecStart does not run " + binDest + " once %h/go/bin/fleet is replaced")
	}
	return out, nil
}

// writeSums writes dist/SHA256SUMS: one "<sha256>  <name>" line per file, sorted by name, as
// sha256sum(1) writes them (sha256sum -c SHA256SUMS checks them).
func writeSums(dist string, names []string) error {
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		f, err := os.Open(filepath.Join(dist, n))
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), n)
	}
	return os.WriteFile(filepath.Join(dist, "SHA256SUMS"), []byte(b.String()), 0o644)
}
