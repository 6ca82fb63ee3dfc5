package cli

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ghostwatch/ghostwatch/deploy"
)

// The Deployment ships args the controller accepts.
func TestDeployedControllerArgsAreValid(t *testing.T) {
	d, err := deploy.ControllerDeployment()
	if err != nil {
		t.Fatal(err)
	}
	args := d.Spec.Template.Spec.Containers[0].Args
	var out, errOut bytes.Buffer
	cmd := newControllerCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	if args[0] != cmd.Name() {
		t.Fatalf("args %v: want the %s command first", args, cmd.Name())
	}
	if err := cmd.ParseFlags(args[1:]); err != nil {
		t.Fatalf("deploy/controller/deployment.yaml args %v: %v", args, err)
	}
}

// Without an API server it says which and exits 2, before campaigning.
func TestControllerWithoutAnAPIServer(t *testing.T) {
	code, _, errOut := run(t, "", "controller", "--server=https://127.0.0.1:1", "--listen=", "--lease-namespace=x", "--identity=me",
		"--request-timeout=2s", "--log-format=text")
	if code != ExitError || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}
