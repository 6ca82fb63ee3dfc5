package controlplane

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// The API server's faults, for tests of what its clients do when it hangs,
// goes down or restarts: its clients are told nothing, as in a cluster.

// PauseAPIServer stops the API server's process (SIGSTOP), as a hung
// server is: its port accepts connections and its open connections stay
// up, but nothing is answered, until ResumeAPIServer.
func (cp *ControlPlane) PauseAPIServer() error {
	return cp.signalAPIServer(syscall.SIGSTOP)
}

// ResumeAPIServer lets a paused API server run again (SIGCONT).
func (cp *ControlPlane) ResumeAPIServer() error {
	return cp.signalAPIServer(syscall.SIGCONT)
}

func (cp *ControlPlane) signalAPIServer(sig syscall.Signal) error {
	if cp.api == nil || cp.api.retired {
		return errors.New("the API server is not running")
	}
	if err := syscall.Kill(cp.api.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("sending %s to kube-apiserver: %w", sig, err)
	}
	return nil
}

// StopAPIServer stops the API server (SIGTERM, then SIGKILL after 10 s):
// its port refuses connections until StartAPIServer. Check does not report
// the stopped server; etcd and the controller manager run on.
func (cp *ControlPlane) StopAPIServer() error {
	if cp.api == nil || cp.api.retired {
		return errors.New("the API server is not running")
	}
	cp.api.retired = true
	// A paused server would not see SIGTERM before SIGKILL.
	_ = syscall.Kill(cp.api.cmd.Process.Pid, syscall.SIGCONT)
	cp.api.stop(10 * time.Second)
	return nil
}

// StartAPIServer starts the API server StopAPIServer stopped, with the same
// flags, port, certificates and etcd, and returns once it is ready. Its
// log is a file of its own (kube-apiserver-2.log, and so on).
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	if cp.api != nil && !cp.api.retired {
		return errors.New("the API server is running: stop it first")
	}
	cp.apiStarts++
	return cp.startAPIServer(ctx, fmt.Sprintf("kube-apiserver-%d", cp.apiStarts+1))
}
