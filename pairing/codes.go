package pairing

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/phase-console/fleet/access"
)

// Pairing codes (SPEC R8).
const (
	// CodeAlphabet holds the letters of a code: no vowels (nor Y), so that a code spells no word
	// and has no O or I to be taken for 0 or 1.
	CodeAlphabet = "BCDFGHJKLMNPQRSTVWXZ"
	// CodeLength is how many letters a code has (20^8, about 2^34.6).
	CodeLength = 8
	// CodeTTL is how long a code is valid after it is issued.
	CodeTTL = 5 * time.Minute
	// MaxWrongPasswords is how many wrong passwords kill a code.
	MaxWrongPasswords = 5
)

// codeKeep is how long a dead code (used, burned or expired) is remembered after its expiry, so
// that Redeem can say why it is refused; after that it is pruned and is ErrNoSuchCode.
const codeKeep = time.Hour

// Why Redeem refused a code. A refusal for any other reason (the folder, a file, the password
// check failing) is another error; all of them mean: not paired.
var (
	ErrNoSuchCode    = errors.New("no such pairing code")
	ErrCodeExpired   = errors.New("the pairing code has expired")
	ErrCodeUsed      = errors.New("the pairing code has been used")
	ErrCodeBurned    = errors.New("the pairing code is dead after too many wrong passwords")
	ErrWrongPassword = errors.New("wrong pairing password")
)

type codeRecord struct {
	SHA256         string    `json:"sha256"` // hex, of the normalized code
	Name           string    `json:"name,omitempty"`
	Issued         time.Time `json:"issued"`
	Expires        time.Time `json:"expires"`
	WrongPasswords int       `json:"wrong_passwords"`
	Used           bool      `json:"used,omitempty"`
	// Consoles are the patterns the device paired with this code may open (SPEC G1); absent
	// is every console.
	Consoles *[]string `json:"consoles,omitempty"`
}

type codesFile struct {
	Version int          `json:"format"` // the file's format: fileVersion
	Codes   []codeRecord `json:"codes"`

	read int // the format of the file it was read from (pairingFile)
}

func (f *codesFile) version() int       { return f.Version }
func (f *codesFile) readFormat() *int   { return &f.read }
func (f *codesFile) legacy() legacyFile { return &codesFileV1{} }
func (f *codesFile) fromLegacy(l legacyFile) {
	f.Version, f.Codes = fileVersion, l.(*codesFileV1).Codes
}

// codesFileV1 is codes.json of format 1, before "format".
type codesFileV1 struct {
	Version int          `json:"version"` // 1
	Codes   []codeRecord `json:"codes"`
}

func (f *codesFileV1) version() int { return f.Version }

// IssueCode issues a fresh pairing code, valid CodeTTL from now, and returns it as shown to a
// person: XXXX-XXXX. name (may be empty) is what the device will be called, as `fleet reach pair
// --name N` gives it; Redeem returns it. Only the code's SHA-256 is stored, in codes.json among the
// outstanding codes, under the folder's lock; codes long dead are pruned.
func IssueCode(dir, name string, now time.Time) (string, error) {
	return IssueCodeFor(dir, name, access.Everything, now)
}

// IssueCodeFor is IssueCode for a device that may open only consoles (nil: none), as `fleet
// reach pair --consoles` gives them; RedeemCode returns them with the name.
func IssueCodeFor(dir, name string, consoles *access.Grant, now time.Time) (string, error) {
	name = cleanName(name)
	code, err := newCode()
	if err != nil {
		return "", err
	}
	sum := codeHash(code)
	path := filepath.Join(dir, CodesFile)
	err = withLock(dir, func() error {
		f, err := readCodes(path)
		if err != nil {
			return err
		}
		f.prune(now)
		for _, c := range f.Codes {
			if c.SHA256 == sum {
				// 1 in 2^34 per outstanding code; a fresh code is cheaper than a rule about it.
				return errCodeClash
			}
		}
		f.Codes = append(f.Codes, codeRecord{SHA256: sum, Name: name, Issued: now.UTC(), Expires: now.Add(CodeTTL).UTC(),
			Consoles: patternsOf(consoles)})
		return writeJSON(path, f)
	})
	if errors.Is(err, errCodeClash) {
		return IssueCodeFor(dir, name, consoles, now)
	}
	if err != nil {
		return "", err
	}
	return code[:4] + "-" + code[4:], nil
}

var errCodeClash = errors.New("code clash")

// NormalizeCode turns what a person typed into a code's canonical form, 8 upper-case letters of
// CodeAlphabet: case, spaces and dashes are ignored. ok is false for anything else.
func NormalizeCode(in string) (code string, ok bool) {
	if len(in) > 64 {
		return "", false
	}
	b := make([]byte, 0, CodeLength)
	for i := 0; i < len(in); i++ {
		c := in[i]
		switch {
		case c == ' ' || c == '-' || c == '\t':
			continue
		case 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		}
		if !inAlphabet(c) || len(b) == CodeLength {
			return "", false
		}
		b = append(b, c)
	}
	if len(b) != CodeLength {
		return "", false
	}
	return string(b), true
}

// Issued is what a pairing code was issued for: the name of the device it pairs and what that
// device may open.
type Issued struct {
	Name     string
	Consoles *access.Grant // never nil when RedeemCode returns no error
}

// RedeemCode uses a pairing code. The code is judged first — unknown, expired, used or dead
// after MaxWrongPasswords wrong passwords is refused with the matching error, without calling
// checkPassword — and only for a live code does checkPassword run (so scrypt runs only then). A
// wrong password is counted against the code (ErrWrongPassword); a right one uses the code up and
// returns the name it was issued with. An error from checkPassword (no password set, the caller
// gave up waiting for scrypt) refuses without counting: no answer about the password was given.
//
// All of it happens under the folder's lock, so a code pairs exactly once and its count of wrong
// passwords is exact even when raced from several processes. The lock is held while checkPassword
// runs: attempts are serialized, which the door's limiter (R6) keeps few. Each attempt is counted
// in the file before checkPassword runs (and the count taken back for a right password or an
// error): if it cannot be written — a full disk — no password is checked and pairing is refused,
// so MaxWrongPasswords holds whatever the disk. If the outcome cannot be written, pairing is
// refused.
//
// The time is read from clock once the lock is held, and that one reading judges the code's
// expiry and prunes the file: a code is judged when it is used, never at a time its caller read
// earlier. So the pairing POST reads no clock before its form has arrived: a form that keeps
// moving is never cut off (SPEC S9), and a time read before it would let a code that expired
// while the form was on its way pair a device (R8: valid 5 minutes).
//
// It returns what the code was issued for: the name and the consoles that the device it pairs
// may open (SPEC G1).
func RedeemCode(dir, code string, clock func() time.Time, checkPassword func() (bool, error)) (Issued, error) {
	var issued Issued
	norm, ok := NormalizeCode(code)
	if !ok {
		return Issued{}, ErrNoSuchCode
	}
	if clock == nil {
		clock = time.Now
	}
	sum := codeHash(norm)
	path := filepath.Join(dir, CodesFile)
	err := withLock(dir, func() error {
		now := clock() // under the lock: the time the code is used (see above)
		f, err := readCodes(path)
		if err != nil {
			return err
		}
		i := f.find(sum)
		if i < 0 {
			return ErrNoSuchCode
		}
		c := &f.Codes[i]
		switch {
		case c.Used:
			return ErrCodeUsed
		case c.WrongPasswords >= MaxWrongPasswords:
			return ErrCodeBurned
		case !now.Before(c.Expires):
			return ErrCodeExpired
		}
		// The attempt is counted before it is made: were the count written after a wrong
		// password, a disk too full to write it would allow any number of guesses (F2).
		c.WrongPasswords++
		if err := writeJSON(path, f); err != nil {
			return fmt.Errorf("pairing password not checked: %w", err)
		}
		right, err := checkPassword()
		if err != nil {
			c.WrongPasswords-- // no answer was given; if this write fails, it stays counted
			writeJSON(path, f)
			return fmt.Errorf("pairing password not checked: %w", err)
		}
		if !right {
			return ErrWrongPassword
		}
		c.WrongPasswords--
		c.Used = true
		issued.Name = c.Name
		if issued.Consoles, err = consolesOf(c.Consoles); err != nil {
			issued.Consoles = access.Nothing // not reached: readCodes refuses such a file
		}
		f.prune(now)
		return writeJSON(path, f)
	})
	if err != nil {
		return Issued{}, err
	}
	return issued, nil
}

// readCodes reads codes.json; a missing file is no codes.
func readCodes(path string) (*codesFile, error) {
	f := &codesFile{Version: fileVersion}
	if err := readJSON(path, f); err != nil && !notExist(err) {
		return nil, err
	}
	for _, c := range f.Codes {
		if len(c.SHA256) != 2*sha256.Size {
			return nil, &ParseError{Path: path, Err: errors.New("a code's sha256 is not 64 hex digits")}
		}
		if _, err := consolesOf(c.Consoles); err != nil {
			return nil, &ParseError{Path: path, Err: fmt.Errorf("a code's consoles: %v", err)}
		}
		if _, err := hex.DecodeString(c.SHA256); err != nil {
			return nil, &ParseError{Path: path, Err: errors.New("a code's sha256 is not 64 hex digits")}
		}
	}
	return f, nil
}

// find returns the index of the code whose hash is sum, or -1. It compares with every outstanding
// code in constant time, so the time taken says nothing about how near a guess came.
func (f *codesFile) find(sum string) int {
	found := -1
	for i, c := range f.Codes {
		if subtle.ConstantTimeCompare([]byte(c.SHA256), []byte(sum)) == 1 {
			found = i
		}
	}
	return found
}

// prune forgets the codes dead for longer than codeKeep.
func (f *codesFile) prune(now time.Time) {
	kept := f.Codes[:0]
	for _, c := range f.Codes {
		if now.Before(c.Expires.Add(codeKeep)) {
			kept = append(kept, c)
		}
	}
	f.Codes = kept
}

func codeHash(norm string) string {
	sum := sha256.Sum256([]byte(norm))
	return hex.EncodeToString(sum[:])
}

// newCode draws CodeLength letters of CodeAlphabet from crypto/rand, without bias: a byte is used
// only below the largest multiple of the alphabet's size (240), else drawn again.
func newCode() (string, error) {
	const n = len(CodeAlphabet)
	const limit = 256 / n * n
	out := make([]byte, 0, CodeLength)
	buf := make([]byte, 2*CodeLength)
	for len(out) < CodeLength {
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		for _, b := range buf {
			if int(b) < limit && len(out) < CodeLength {
				out = append(out, CodeAlphabet[int(b)%n])
			}
		}
	}
	return string(out), nil
}

func inAlphabet(c byte) bool {
	for i := 0; i < len(CodeAlphabet); i++ {
		if CodeAlphabet[i] == c {
			return true
		}
	}
	return false
}
