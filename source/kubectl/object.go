package kubectl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// Object is one object of a kind kept, as Convert is given it.
type Object struct {
	APIVersion, Kind string
	Name             string
	// Namespace is "default" for an object of a namespaced kind saved
	// without one, and "" for a cluster-scoped kind.
	Namespace       string
	UID             string
	ResourceVersion string
	// Raw is the object as JSON: as the input wrote it, or converted from
	// YAML.
	Raw []byte

	name string // the input's
	src  object
	what string // the kind, namespace and name, for errors
}

// Line returns the line of the input where the object starts.
func (o *Object) Line() int { return o.src.line }

// Where returns the input and line where the object starts: "name:line".
func (o *Object) Where() string { return fmt.Sprintf("%s:%d", o.name, o.Line()) }

// Decode decodes the object into v as encoding/json does, but for numbers
// decoded into interface values, which are json.Number (exact where an
// int64 beyond 2^53 would round as a float64). Fields v does not know are
// ignored. Its error is an *Error that names the object, the field that is
// wrong (the line of its value, in JSON), what the field wants and what it
// found.
func (o *Object) Decode(v any) error {
	dec := json.NewDecoder(bytes.NewReader(o.Raw))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		err = decodeError(o.src, o.what, err)
		var e *Error
		if errors.As(err, &e) {
			e.Name = o.name
		}
		return err
	}
	return nil
}

// object is one object as JSON, placed in the input. JSON read from the
// input keeps its newlines, which place each field; JSON converted from YAML
// has none, which places all of it at line.
type object struct {
	raw  []byte
	line int  // where the object starts
	yaml bool // converted from YAML
}

// lineAt returns the line of raw[off].
func (o object) lineAt(off int64) int {
	if o.yaml {
		return o.line
	}
	return o.line + bytes.Count(o.raw[:min(max(off, 0), int64(len(o.raw)))], []byte{'\n'})
}

// lastLine returns the line of the last byte of raw that is not white space.
func (o object) lastLine() int {
	return o.lineAt(int64(len(bytes.TrimRight(o.raw, " \t\r\n")) - 1))
}

func readHeader(o object) (*header, error) {
	var h header
	if err := json.Unmarshal(o.raw, &h); err != nil {
		return nil, decodeError(o, "", err)
	}
	return &h, nil
}

// decodeError places an error from decoding o in the input and says which
// field was wrong.
func decodeError(o object, what string, err error) error {
	if what != "" {
		what += ": "
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "the object"
		}
		// A string given unquoted may read as a boolean or a number.
		var hint string
		if te.Type != nil && te.Type.Kind() == reflect.String && (te.Value == "bool" || te.Value == "number") {
			hint = ": quote it"
			if te.Value == "bool" && o.yaml {
				hint += ", as YAML reads y, n, yes, no, on and off unquoted as booleans"
			}
		}
		return errAt(o.lineAt(te.Offset-1), "%s%s: expected %s, found %s%s", what, field, jsonTypeName(te.Type), te.Value, hint)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return errAt(o.lineAt(se.Offset-1), "%s%w", what, se)
	}
	return errAt(o.line, "%s%s", what, strings.TrimPrefix(err.Error(), "json: "))
}

// jsonKindOf names the kind of JSON value raw is.
func jsonKindOf(raw []byte) string {
	t, _ := json.NewDecoder(bytes.NewReader(raw)).Token()
	return jsonTokenKind(t)
}

// jsonTokenKind names the kind of JSON value that starts with token t.
func jsonTokenKind(t json.Token) string {
	switch t := t.(type) {
	case json.Delim:
		if t == '[' {
			return "array"
		}
		return "object"
	case string:
		return "string"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return "number"
}

// jsonTypeName names a Go type as the JSON it is read from.
func jsonTypeName(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("an integer (%s)", t.Kind())
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}
