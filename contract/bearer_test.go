package contract

import (
	"net/http"
	"testing"
)

func TestParseBearer(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals []string
		want string
		ok   bool
	}{
		{"bearer", []string{"Bearer abc"}, "abc", true},
		{"scheme in any case", []string{"bEARER abc"}, "abc", true},
		{"several spaces", []string{"Bearer   abc"}, "abc", true},
		{"token68 characters", []string{"Bearer a-b._~+/c=="}, "a-b._~+/c==", true},
		{"no header", nil, "", false},
		{"two headers", []string{"Bearer abc", "Bearer abc"}, "", false},
		{"empty", []string{""}, "", false},
		{"scheme alone", []string{"Bearer"}, "", false},
		{"scheme and space", []string{"Bearer "}, "", false},
		{"basic", []string{"Basic YWxpY2U6cHc="}, "", false},
		{"other scheme with Bearer inside", []string{"Bearerx abc"}, "", false},
		{"tab", []string{"Bearer\tabc"}, "", false},
		{"two tokens", []string{"Bearer abc def"}, "", false},
		{"tab inside", []string{"Bearer abc\tdef"}, "", false},
		{"trailing space and tab", []string{"Bearer abc \t"}, "abc", true},
		{"control byte", []string{"Bearer abc\x00"}, "", false},
		{"comma list", []string{"Bearer abc, Basic x"}, "", false},
	} {
		h := http.Header{}
		for _, v := range tc.vals {
			h.Add("Authorization", v)
		}
		got, ok := ParseBearer(h)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: ParseBearer(%q) = %q, %v; want %q, %v", tc.name, tc.vals, got, ok, tc.want, tc.ok)
		}
	}
}
