// Package version says which fleet this is (SPEC O1): the one line of `fleet version`.
//
// The version is the one a release build stamps (scripts/release links it in with
// -ldflags "-X github.com/phase-console/fleet/internal/version.stamped=v1.2.3"), else the main
// module's version from the build info (`go install …/cmd/fleet@v1.2.3` records it), else
// "devel". The commit is the one a release build stamps (stampedCommit), else the VCS revision
// the go command recorded (vcs.revision, with "-dirty" when vcs.modified), else "unknown": a
// build with -buildvcs=false, or outside a checkout, records none. It reads only the binary's
// own build information; it must never run git or read the disk.
package version

import (
	"runtime"
	"runtime/debug"
)

// Set by a release build with -ldflags -X; empty otherwise.
var (
	stamped       string // "v1.2.3"
	stampedCommit string // the full revision, with "-dirty" when the tree had changes
)

// commitLen is how much of a revision the line shows: as much as Go's pseudo-versions do.
const commitLen = 12

// Line is `fleet version`'s line: "fleet <version> (<commit>, <go version>, <os>/<arch>)".
func Line() string {
	bi, _ := debug.ReadBuildInfo()
	return describe(stamped, stampedCommit, bi, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
}

// Version is the version alone, as Line names it.
func Version() string {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(stamped, bi)
}

func describe(stamp, stampCommit string, bi *debug.BuildInfo, goVersion, platform string) string {
	return "fleet " + versionOf(stamp, bi) + " (" + commitOf(stampCommit, bi) + ", " + goVersion + ", " + platform + ")"
}

func versionOf(stamp string, bi *debug.BuildInfo) string {
	if stamp != "" {
		return stamp
	}
	if bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

func commitOf(stampCommit string, bi *debug.BuildInfo) string {
	if stampCommit != "" {
		return shorten(stampCommit)
	}
	var rev, modified string
	if bi != nil {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
	}
	if rev == "" {
		return "unknown"
	}
	rev = shorten(rev)
	if modified == "true" {
		rev += "-dirty"
	}
	return rev
}

// shorten cuts a revision to commitLen, keeping a "-dirty" that follows it.
func shorten(rev string) string {
	head, dirty := rev, ""
	if len(rev) > len("-dirty") && rev[len(rev)-len("-dirty"):] == "-dirty" {
		head, dirty = rev[:len(rev)-len("-dirty")], "-dirty"
	}
	if len(head) > commitLen {
		head = head[:commitLen]
	}
	return head + dirty
}
