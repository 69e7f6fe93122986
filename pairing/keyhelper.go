package pairing

// Where scrypt runs. One computation at ln=17 allocates 128 MiB. In a long-running server that
// allocation lands on the server's own heap and starts a garbage-collection cycle every time, and a
// flood of wrong passwords then slows every other request (measured: a paired device's p99 went
// from 0.3 ms to 68 ms; with the collector off it did not move). So a server can run each
// computation in a short-lived helper process instead: its memory is never the server's, and the
// kernel takes it back when the helper exits.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/scrypt"
)

// A KeyFunc computes an scrypt key; scrypt.Key is one.
type KeyFunc func(password, salt []byte, N, r, p, keyLen int) ([]byte, error)

// keyFunc, when set, replaces the in-process scrypt for every password check and hash.
var keyFunc atomic.Pointer[KeyFunc]

// UseKeyFunc makes every later password check and hash in this process compute scrypt with f
// (nil: in this process again). The gate of MaxConcurrentScrypt still applies.
func UseKeyFunc(f KeyFunc) {
	if f == nil {
		keyFunc.Store(nil)
		return
	}
	keyFunc.Store(&f)
}

// computeKey is scrypt as configured: the helper process's, or this process's.
func computeKey(pw, salt []byte, N, r, p, keyLen int) ([]byte, error) {
	if f := keyFunc.Load(); f != nil {
		return (*f)(pw, salt, N, r, p, keyLen)
	}
	return scryptKey(pw, salt, N, r, p, keyLen)
}

// keyRequest is what a helper process reads on its stdin: one JSON object, one line.
type keyRequest struct {
	Password []byte `json:"password"`
	Salt     []byte `json:"salt"`
	N        int    `json:"n"`
	R        int    `json:"r"`
	P        int    `json:"p"`
	KeyLen   int    `json:"key_len"`
}

// helperTimeout bounds one helper process; scrypt at ln=17 takes about 0.25 s.
const helperTimeout = 30 * time.Second

// HelperProcessKeyFunc returns a KeyFunc that runs each computation in a new process,
// exec.Command(path, args...), which must answer as ServeKeyHelper does. The password travels on
// the helper's stdin, never in its arguments or environment.
func HelperProcessKeyFunc(path string, args ...string) KeyFunc {
	return func(pw, salt []byte, N, r, p, keyLen int) ([]byte, error) {
		req, err := json.Marshal(keyRequest{Password: pw, Salt: salt, N: N, R: r, P: p, KeyLen: keyLen})
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), helperTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.Stdin = bytes.NewReader(append(req, '\n'))
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("pairing: the scrypt helper failed: %v (%s)", err, bytes.TrimSpace(errb.Bytes()))
		}
		key, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(out.Bytes())))
		if err != nil || len(key) != keyLen {
			return nil, errors.New("pairing: the scrypt helper answered something that is not a key")
		}
		return key, nil
	}
}

// ServeKeyHelper is the helper process's side of HelperProcessKeyFunc: it reads one request from
// in, refuses a cost outside the limits a stored hash may ask for (so that the helper cannot be
// used to eat the machine), computes the key and writes it to out, base64, one line.
func ServeKeyHelper(in io.Reader, out io.Writer) error {
	var req keyRequest
	if err := json.NewDecoder(io.LimitReader(in, 64<<10)).Decode(&req); err != nil {
		return fmt.Errorf("scrypt helper: %v", err)
	}
	logN := 0
	for n := req.N; n > 1; n >>= 1 {
		logN++
	}
	if req.N != 1<<logN || logN < minLogN || logN > maxLogN || req.R < 1 || req.R > maxR || req.P < 1 || req.P > maxP ||
		128*req.R*req.N > maxMemory || req.N*req.R*req.P > maxWork || req.KeyLen != keyLen || len(req.Salt) < saltLen || len(req.Salt) > maxSalt ||
		len(req.Password) > MaxPasswordLen {
		return errors.New("scrypt helper: parameters outside the limits")
	}
	key, err := scrypt.Key(req.Password, req.Salt, req.N, req.R, req.P, req.KeyLen)
	if err != nil {
		return fmt.Errorf("scrypt helper: %v", err)
	}
	_, err = fmt.Fprintln(out, base64.StdEncoding.EncodeToString(key))
	return err
}
