package pairing

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/crypto/scrypt"

	"github.com/phase-console/fleet/internal/state"
)

// Password rules. A password shorter than MinPasswordLen bytes, or longer than MaxPasswordLen, is
// refused by SetPassword and never matches in CheckPasswordContext (no scrypt work is done for it).
const (
	MinPasswordLen = 8
	MaxPasswordLen = 1024
)

// MaxConcurrentScrypt is how many scrypt computations run at a time in this process: one takes
// about 0.25 s and 128 MiB, so a flood of attempts queues instead of eating the machine.
const MaxConcurrentScrypt = 2

// The parameters HashPassword uses (SPEC R8: ln=17, r=8, p=1, 16-byte salt, 32-byte key).
const (
	scryptLogN = 17
	scryptR    = 8
	scryptP    = 1
	saltLen    = 16
	keyLen     = 32
)

// Limits on a stored hash, checked before any work, so that a file asking for ln=30 is refused
// instead of eating the machine: ln 14..20, r 1..16, p 1..4, and at most 256 MiB of memory
// (128·r·2^ln bytes) and four times the default work (2^ln·r·p ≤ 2^22).
const (
	maxLogN   = 20
	maxR      = 16
	maxP      = 4
	maxMemory = 256 << 20
	maxWork   = 1 << 22
	maxSalt   = 64
	maxStored = 256
)

// Seams for tests: the cost used by HashPassword, the lowest cost a stored hash may ask for, the
// key function (to count and gate calls) and a hook run when a caller has to wait for the gate.
var (
	hashLogN    = scryptLogN
	minLogN     = 14
	scryptKey   = scrypt.Key
	testWaiting func()
)

// scryptGate holds one token per scrypt computation running in the process.
var scryptGate = make(chan struct{}, MaxConcurrentScrypt)

// ErrNoPassword says that no pairing password is set yet. It matches fs.ErrNotExist too.
var ErrNoPassword = errors.New("no pairing password is set (fleet reach password)")

// b64 encodes the salt and the hash in the stored string: standard base64 without padding, as the
// PHC string format does. Strict: non-zero trailing bits are refused, so one hash has one spelling.
var b64 = base64.RawStdEncoding.Strict()

// HashPassword hashes pw with scrypt (ln=17, r=8, p=1, a fresh 16-byte salt from crypto/rand, a
// 32-byte key) into the one stored form, `$scrypt$ln=17,r=8,p=1$<salt>$<hash>`, salt and hash in
// standard base64 without padding. pw must be MinPasswordLen to MaxPasswordLen bytes. It waits its
// turn at the process-wide scrypt gate.
func HashPassword(pw []byte) (string, error) {
	if err := checkNewPassword(pw); err != nil {
		return "", err
	}
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	p := scryptParams{logN: hashLogN, r: scryptR, p: scryptP, salt: salt}
	key, err := p.derive(context.Background(), pw)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("$scrypt$ln=%d,r=%d,p=%d$%s$%s", p.logN, p.r, p.p, b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// CheckPasswordContext reports whether pw is the password whose hash is stored. The stored string
// is parsed strictly and its cost checked against the limits before any work: a malformed or
// absurd one is an error and runs no scrypt. A pw of the wrong length is false at once. Otherwise
// it waits for a turn at the scrypt gate (at most MaxConcurrentScrypt at a time in the process),
// or returns ctx's error if ctx ends first, and compares the keys in constant time.
func CheckPasswordContext(ctx context.Context, stored string, pw []byte) (bool, error) {
	p, err := parseStored(stored)
	if err != nil {
		return false, err
	}
	if len(pw) < MinPasswordLen || len(pw) > MaxPasswordLen {
		return false, nil
	}
	key, err := p.derive(ctx, pw)
	if err != nil {
		return false, err
	}
	return subtle.ConstantTimeCompare(key, p.key) == 1, nil
}

// SetPassword hashes pw and stores it in dir's password file (0600, atomic), replacing the old
// one. A password file that is too open is refused, not replaced (F1).
func SetPassword(dir string, pw []byte) error {
	stored, err := HashPassword(pw)
	if err != nil {
		return err
	}
	if err := state.EnsureDir(dir); err != nil {
		return err
	}
	return state.WritePrivateFile(filepath.Join(dir, PasswordFile), []byte(stored+"\n"))
}

// LoadPassword returns the stored hash from dir's password file, checked as CheckPasswordContext checks
// it: a file that is too open, or that does not hold one well-formed hash within the limits, is an
// error naming it. Without a file the error is ErrNoPassword.
func LoadPassword(dir string) (string, error) {
	if err := state.CheckDir(dir); err != nil {
		if notExist(err) {
			return "", fmt.Errorf("%w: %w", ErrNoPassword, err)
		}
		return "", err
	}
	path := filepath.Join(dir, PasswordFile)
	data, err := state.ReadPrivateFile(path)
	if err != nil {
		if notExist(err) {
			return "", fmt.Errorf("%w: %w", ErrNoPassword, err)
		}
		return "", err
	}
	stored := strings.TrimSuffix(string(data), "\n")
	if _, err := parseStored(stored); err != nil {
		return "", &ParseError{Path: path, Err: err}
	}
	return stored, nil
}

func checkNewPassword(pw []byte) error {
	switch {
	case len(pw) == 0:
		return errors.New("the pairing password is empty")
	case len(pw) < MinPasswordLen:
		return fmt.Errorf("the pairing password is too short: at least %d bytes", MinPasswordLen)
	case len(pw) > MaxPasswordLen:
		return fmt.Errorf("the pairing password is too long: at most %d bytes", MaxPasswordLen)
	}
	return nil
}

type scryptParams struct {
	logN, r, p int
	salt, key  []byte
}

// derive runs scrypt with p's cost and salt, holding a turn at the gate.
func (p scryptParams) derive(ctx context.Context, pw []byte) ([]byte, error) {
	if err := acquireScrypt(ctx); err != nil {
		return nil, err
	}
	defer func() { <-scryptGate }()
	return computeKey(pw, p.salt, 1<<p.logN, p.r, p.p, keyLen)
}

func acquireScrypt(ctx context.Context) error {
	select {
	case scryptGate <- struct{}{}:
		return nil
	default:
	}
	if testWaiting != nil {
		testWaiting()
	}
	select {
	case scryptGate <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// parseStored parses `$scrypt$ln=N,r=R,p=P$<salt>$<hash>` exactly: five fields, the three
// parameters in that order in plain decimal, every limit checked, salt 16..64 bytes and a 32-byte
// hash in strict unpadded standard base64. Its errors never quote the string.
func parseStored(s string) (scryptParams, error) {
	var p scryptParams
	bad := func(why string) (scryptParams, error) {
		return scryptParams{}, errors.New("stored password hash: " + why)
	}
	if len(s) > maxStored {
		return bad("too long")
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return bad("contains a space or a character outside printable ASCII")
		}
	}
	f := strings.Split(s, "$")
	if len(f) != 5 || f[0] != "" {
		return bad("not of the form $scrypt$ln=N,r=R,p=P$<salt>$<hash>")
	}
	if f[1] != "scrypt" {
		return bad("not an scrypt hash")
	}
	kv := strings.Split(f[2], ",")
	if len(kv) != 3 {
		return bad("want exactly the parameters ln, r and p")
	}
	var err error
	if p.logN, err = param(kv[0], "ln"); err != nil {
		return bad(err.Error())
	}
	if p.r, err = param(kv[1], "r"); err != nil {
		return bad(err.Error())
	}
	if p.p, err = param(kv[2], "p"); err != nil {
		return bad(err.Error())
	}
	switch {
	case p.logN < minLogN || p.logN > maxLogN:
		return bad(fmt.Sprintf("ln=%d outside %d..%d", p.logN, minLogN, maxLogN))
	case p.r < 1 || p.r > maxR:
		return bad(fmt.Sprintf("r=%d outside 1..%d", p.r, maxR))
	case p.p < 1 || p.p > maxP:
		return bad(fmt.Sprintf("p=%d outside 1..%d", p.p, maxP))
	case 128*p.r<<p.logN > maxMemory:
		return bad(fmt.Sprintf("ln=%d with r=%d needs more than %d MiB", p.logN, p.r, maxMemory>>20))
	case (1<<p.logN)*p.r*p.p > maxWork:
		return bad(fmt.Sprintf("ln=%d, r=%d, p=%d is more work than allowed", p.logN, p.r, p.p))
	}
	if p.salt, err = b64.DecodeString(f[3]); err != nil {
		return bad("salt is not unpadded standard base64")
	}
	if len(p.salt) < saltLen || len(p.salt) > maxSalt {
		return bad(fmt.Sprintf("salt of %d bytes, want %d..%d", len(p.salt), saltLen, maxSalt))
	}
	if p.key, err = b64.DecodeString(f[4]); err != nil {
		return bad("hash is not unpadded standard base64")
	}
	if len(p.key) != keyLen {
		return bad(fmt.Sprintf("hash of %d bytes, want %d", len(p.key), keyLen))
	}
	return p, nil
}

// param parses "name=<1 to 3 digits, no leading zero>".
func param(kv, name string) (int, error) {
	v, ok := strings.CutPrefix(kv, name+"=")
	if !ok {
		return 0, fmt.Errorf("want %s= in its place", name)
	}
	if len(v) == 0 || len(v) > 3 || (len(v) > 1 && v[0] == '0') {
		return 0, fmt.Errorf("%s is not a small decimal number", name)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, fmt.Errorf("%s is not a small decimal number", name)
		}
	}
	return strconv.Atoi(v)
}
