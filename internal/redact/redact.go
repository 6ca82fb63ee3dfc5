package redact

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Marker stands where user information was: "https://xxxxx@host:8501".
const Marker = "xxxxx"

// Addr returns addr with its user information, user name and password
// alike, replaced by Marker. addr is a URL or a host:port with or
// without a scheme ("user:pw@host:8500" keeps no scheme); one that does
// not parse keeps only what follows its last @. An address without @ is
// returned as it is.
func Addr(addr string) string {
	at := strings.LastIndex(addr, "@")
	if at < 0 {
		return addr
	}
	a := addr
	if !strings.Contains(a, "://") {
		a = "http://" + a
	}
	u, err := url.Parse(a)
	if err != nil || u.User == nil {
		// Not a URL: keep what follows the last @ alone.
		return Marker + "@" + addr[at+1:]
	}
	r := URL(u)
	if !strings.Contains(addr, "://") {
		r = strings.TrimPrefix(r, "http://")
	}
	return r
}

// URL returns u as url.URL.String writes it, with its user information
// replaced by Marker; u itself is not changed.
func URL(u *url.URL) string {
	if u == nil {
		return ""
	}
	if u.User == nil {
		return u.String()
	}
	c := *u
	c.User = url.User(Marker)
	return c.String()
}

// userinfo matches the user information of a URL in a text: a scheme,
// ://, then everything up to the last @ before a path, a query, a
// fragment, a blank or a quote (as url.Parse takes the last @ of the
// authority).
var userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s"'<>]*@`)

// Text returns s with the user information of every URL in it replaced by
// Marker, and every form of the user information of addrs (as given,
// decoded, and escaped as url.URL.String escapes it): an address given
// without a scheme ("token@host:7373"), which no pattern finds, may be
// quoted whole by the error of a dial.
func Text(s string, addrs ...string) string {
	for _, a := range addrs {
		for _, secret := range secrets(a) {
			s = strings.ReplaceAll(s, secret, Marker)
		}
	}
	if !strings.Contains(s, "@") {
		return s
	}
	return userinfo.ReplaceAllString(s, "${1}"+Marker+"@")
}

// secrets returns the forms in which addr's user information may be
// printed, longest first: the whole of it and its password alone, each as
// given, decoded, and escaped as url.URL.String escapes it. None when
// addr has none.
func secrets(addr string) []string {
	at := strings.LastIndex(addr, "@")
	if at < 0 {
		return nil
	}
	raw := addr[:at]
	if i := strings.Index(raw, "://"); i >= 0 {
		raw = raw[i+3:]
	}
	forms := []string{raw}
	if _, pw, ok := strings.Cut(raw, ":"); ok {
		forms = append(forms, pw)
	}
	for _, f := range slices.Clone(forms) {
		d, err := url.PathUnescape(f)
		if err != nil {
			continue
		}
		forms = append(forms, d, url.User(d).String())
		if u, pw, ok := strings.Cut(d, ":"); ok {
			forms = append(forms, url.UserPassword(u, pw).String())
		}
	}
	var out []string
	for _, f := range forms {
		if f != "" && f != Marker && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	// The longest first: a password is part of user:password.
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// Error returns err with Text applied to what it says, or err itself when
// that changes nothing; the error returned wraps err, so errors.Is and
// errors.As see through it. The URL of every *url.Error in err's chain is
// redacted in place too, for code that prints it alone.
func Error(err error, addrs ...string) error {
	if err == nil {
		return nil
	}
	redactURLErrors(err, addrs)
	msg := err.Error()
	r := Text(msg, addrs...)
	if r == msg {
		return err
	}
	return &redacted{msg: r, err: err}
}

// redactURLErrors redacts the URL of every *url.Error in err's tree.
func redactURLErrors(err error, addrs []string) {
	for err != nil {
		if ue, ok := err.(*url.Error); ok {
			ue.URL = Text(Addr(ue.URL), addrs...)
		}
		switch e := err.(type) {
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				redactURLErrors(inner, addrs)
			}
			return
		case interface{ Unwrap() error }:
			err = e.Unwrap()
		default:
			return
		}
	}
}

// redacted is an error whose text is redacted, wrapping the original.
type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }
