package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/yaml"

	"github.com/ghostwatch/ghostwatch/internal/redact"
	"github.com/ghostwatch/ghostwatch/source/hostlocal"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

// A bundle never holds a credential: it is made to be handed to whoever
// helps with an incident. The node's files are screened by their
// structure before they go in (screenNodeFile), and what collect says of
// the API server names neither its address nor the credentials it was
// reached with (apiServerError).

// redactedValue replaces, in a JSON file of the node, the value of every
// key whose name says it holds a credential.
const redactedValue = "REDACTED"

// credentialKey matches the names of the keys whose values are
// credentials: k8s_auth_token, etcd_key_file, password, client-secret,
// client-key-data, client-certificate-data, credentials, ...
var credentialKey = regexp.MustCompile(`(?i)token|passw|secret|key|certificate-data|credential`)

// secretShape matches what reads like a credential in a file that is not
// JSON: a JWT (a service account's token), a PEM private key, a bearer
// token, a YAML or INI token, password or secret.
var secretShape = regexp.MustCompile(`eyJ[A-Za-z0-9_-]+\.eyJ|PRIVATE KEY-----|(?i:bearer\s+[A-Za-z0-9._~+/=-]{8})|(?i:(token|passw\w*|secret|client-key-data)\s*[:=])`)

// screened is what of one of the node's files a bundle holds.
type screened struct {
	// data goes in; nil when withheld says why not.
	data     []byte
	withheld string
	// redacted are the JSON paths of the values replaced by
	// redactedValue.
	redacted []string
}

// screenNodeFile decides what of the node's file nodePath a bundle holds,
// by the file's structure: a kubeconfig is left out (it holds a user's
// credentials and the API server's address), and so is a PEM private key;
// a JSON file (a CNI configuration) goes in with the value of every key
// whose name says it is a credential replaced by redactedValue, at any
// depth. In the CNI configurations' directory, where Calico and Multus
// keep their kubeconfigs and TLS keys, anything else is left out: the
// rules read only the JSON configurations there. Elsewhere (host-local's
// reservations, Calico's node name) a file that is not JSON goes in
// unless it reads like a credential.
func screenNodeFile(nodePath string, data []byte) screened {
	if isKubeconfig(data) {
		return screened{withheld: "a kubeconfig: it holds a user's credentials (a token, a password or a client key) and the API server's address, which no bundle holds; nothing a rule reads"}
	}
	if bytes.Contains(data, []byte("PRIVATE KEY-----")) {
		return screened{withheld: "a private key, which no bundle holds; nothing a rule reads"}
	}
	if out, redacted, err := redactJSON(data); err == nil {
		return screened{data: out, redacted: redacted}
	}
	if inCNIConfDir(nodePath) {
		return screened{withheld: "not a JSON CNI configuration: it may hold a credential (a kubeconfig, a certificate, a key, a token), which no bundle holds; the rules read only the JSON configurations here"}
	}
	if secretShape.Match(data) {
		return screened{withheld: "it reads like a credential (a token, a password or a key), which no bundle holds"}
	}
	return screened{data: data}
}

// inCNIConfDir reports whether the node's path lies under the CNI
// configurations' directory.
func inCNIConfDir(nodePath string) bool {
	dir := path.Clean(hostlocal.ConfDir)
	return strings.HasPrefix(path.Clean(nodePath), dir+"/")
}

// isKubeconfig reports whether data parses, as YAML or JSON, as a
// kubeconfig: kind Config, or a list of clusters, users or contexts.
func isKubeconfig(data []byte) bool {
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		return false
	}
	if k, _ := m["kind"].(string); k == "Config" {
		return true
	}
	for _, key := range []string{"clusters", "users", "contexts"} {
		if _, ok := m[key].([]any); ok {
			return true
		}
	}
	return false
}

// redactJSON returns the JSON value data holds, its keys in their order,
// with the value of every key credentialKey matches replaced by
// redactedValue, at any depth, indented; and the paths of the values
// replaced. An error means data is not one JSON value.
func redactJSON(data []byte) ([]byte, []string, error) {
	trimmed := bytes.TrimSpace(bytes.TrimPrefix(data, []byte("\ufeff")))
	if len(trimmed) == 0 || (trimmed[0] != '{' && trimmed[0] != '[') {
		return nil, nil, errors.New("not a JSON object or array")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	var out bytes.Buffer
	var redacted []string
	if err := copyJSON(dec, &out, "", &redacted); err != nil {
		return nil, nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, errors.New("more than one JSON value")
	}
	if len(redacted) == 0 {
		// Nothing to hide: the file as it was.
		return data, nil, nil
	}
	var ind bytes.Buffer
	if err := json.Indent(&ind, out.Bytes(), "", "  "); err != nil {
		return nil, nil, err
	}
	ind.WriteByte('\n')
	return ind.Bytes(), redacted, nil
}

// copyJSON copies the next JSON value of dec to out, compact, replacing
// the values of credential keys; at is the value's path.
func copyJSON(dec *json.Decoder, out *bytes.Buffer, at string, redacted *[]string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			out.WriteByte('{')
			for i := 0; dec.More(); i++ {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				key, _ := kt.(string)
				if i > 0 {
					out.WriteByte(',')
				}
				writeJSON(out, key)
				out.WriteByte(':')
				p := key
				if at != "" {
					p = at + "." + key
				}
				if credentialKey.MatchString(key) {
					var skip json.RawMessage
					if err := dec.Decode(&skip); err != nil {
						return err
					}
					writeJSON(out, redactedValue)
					*redacted = append(*redacted, p)
					continue
				}
				if err := copyJSON(dec, out, p, redacted); err != nil {
					return err
				}
			}
			out.WriteByte('}')
		case '[':
			out.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					out.WriteByte(',')
				}
				if err := copyJSON(dec, out, at+"["+strconv.Itoa(i)+"]", redacted); err != nil {
					return err
				}
			}
			out.WriteByte(']')
		}
		_, err := dec.Token() // the closing delimiter
		return err
	default:
		writeJSON(out, t)
	}
	return nil
}

// writeJSON writes v as JSON, without escaping HTML.
func writeJSON(out *bytes.Buffer, v any) {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	// Encode ends the value with a newline.
	out.Truncate(out.Len() - 1)
}

// apiServerError says what failed in a request to the API server without
// its address or the credentials it was reached with: the API's own
// status when it answered, what the connection did otherwise ("connect:
// connection refused", "no such host"), with every mention of server
// (the REST config's Host) replaced by "the API server".
func apiServerError(err error, server string) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return scrubServer(kube.DescribeError(err, ""), server)
	}
	var (
		ue  *url.Error
		op  *net.OpError
		dns *net.DNSError
	)
	switch {
	case errors.As(err, &dns):
		err = fmt.Errorf("the API server's name does not resolve: %s", dns.Err)
	case errors.As(err, &op) && op.Err != nil:
		err = fmt.Errorf("the API server is not reachable: %w", op.Err)
	case errors.As(err, &ue):
		err = ue.Err
	}
	return scrubServer(err.Error(), server)
}

// scrubServer replaces every mention of server in s (its URL, its host
// and port, with or without user information) by "the API server", and
// any URL's user information by redact.Marker.
func scrubServer(s, server string) string {
	s = redact.Text(s, server)
	if server == "" {
		return s
	}
	a := server
	if !strings.Contains(a, "://") {
		a = "https://" + a
	}
	u, err := url.Parse(a)
	if err != nil || u.Host == "" {
		return strings.ReplaceAll(s, server, "the API server")
	}
	hostPort := u.Host
	if u.Port() == "" {
		port := "443"
		if u.Scheme == "http" {
			port = "80"
		}
		hostPort = net.JoinHostPort(u.Hostname(), port)
	}
	// The longest mentions first: the URL holds the host.
	mentions := []string{redact.URL(u), u.Scheme + "://" + u.Host, u.Scheme + "://" + hostPort, hostPort, u.Host}
	for _, m := range mentions {
		// What net/http and net say of a request, as the sentence
		// around them needs it: the request's URL quoted before its
		// error goes, a dial's failure says what failed.
		q := regexp.QuoteMeta(m)
		s = regexp.MustCompile(`[A-Z][a-z]+ "`+q+`[^"]*": `).ReplaceAllLiteralString(s, "")
		s = regexp.MustCompile(`dial tcp[46]? `+q+`: `).ReplaceAllLiteralString(s, "the API server is not reachable: ")
	}
	for _, m := range mentions {
		s = strings.ReplaceAll(s, m, "the API server")
	}
	return s
}
