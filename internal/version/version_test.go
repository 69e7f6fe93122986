package version

import (
	"regexp"
	"runtime/debug"
	"testing"
)

// TestDescribe_O1: the line's version is the release stamp, else the module version, else
// "devel"; its commit is the stamped one, else the build info's revision (12 hex digits, -dirty
// when modified), else "unknown" (a build with -buildvcs=false records none).
func TestDescribe_O1(t *testing.T) {
	rev := "0123456789abcdef0123456789abcdef01234567"
	info := func(v string, settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/phase-console/fleet", Version: v}}
		for i := 0; i+1 < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	for _, row := range []struct {
		name, stamp, stampCommit string
		bi                       *debug.BuildInfo
		want                     string
	}{
		{"O1 release stamp wins", "v1.4.0", rev, info("(devel)", "vcs.revision", "ffffffffffffffff"),
			"fleet v1.4.0 (0123456789ab, go1.26.8, linux/amd64)"},
		{"O1 stamped dirty commit", "v1.4.0", rev + "-dirty", info("(devel)"),
			"fleet v1.4.0 (0123456789ab-dirty, go1.26.8, linux/amd64)"},
		{"O1 go install @version", "", "", info("v1.3.2"),
			"fleet v1.3.2 (unknown, go1.26.8, linux/amd64)"},
		{"O1 checkout build", "", "", info("(devel)", "vcs", "git", "vcs.revision", rev, "vcs.modified", "false"),
			"fleet devel (0123456789ab, go1.26.8, linux/amd64)"},
		{"O1 modified checkout", "", "", info("(devel)", "vcs.revision", rev, "vcs.modified", "true"),
			"fleet devel (0123456789ab-dirty, go1.26.8, linux/amd64)"},
		{"O1 buildvcs=false", "", "", info("(devel)", "-trimpath", "true"),
			"fleet devel (unknown, go1.26.8, linux/amd64)"},
		{"O1 no build info", "", "", nil,
			"fleet devel (unknown, go1.26.8, linux/amd64)"},
		{"O1 empty module version", "", "", info(""),
			"fleet devel (unknown, go1.26.8, linux/amd64)"},
	} {
		t.Run(row.name, func(t *testing.T) {
			if got := describe(row.stamp, row.stampCommit, row.bi, "go1.26.8", "linux/amd64"); got != row.want {
				t.Errorf("got  %q\nwant %q", got, row.want)
			}
		})
	}
}

// lineRE is O1's line.
var lineRE = regexp.MustCompile(`^fleet \S+ \((unknown|[0-9a-f]{1,12}(-dirty)?), go\S+, [a-z0-9]+/[a-z0-9]+\)$`)

// TestLine_O1: this test binary's own line has O1's shape.
func TestLine_O1(t *testing.T) {
	if got := Line(); !lineRE.MatchString(got) {
		t.Fatalf("Line() = %q, want %s", got, lineRE)
	}
}
