package controlplane

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubelet/pkg/cri/streaming/portforward"
)

// PortDialer connects to port of the pod ns/name, as a container runtime
// reaches a port in a pod's network namespace.
type PortDialer func(ctx context.Context, ns, name string, port int32) (net.Conn, error)

// ServeKubeletAPI registers a Node called name whose kubelet serves its
// API on 127.0.0.1, and serves the part of that API the tests use: a
// port-forward to a pod bound to the node, through dial. The API server
// reaches it as it reaches any kubelet (its address and port in the Node's
// status, its certificate checked against the cluster's CA), so that
// `kubectl port-forward` and client-go's port-forward work end to end. It
// stops when ctx ends.
func (cp *ControlPlane) ServeKubeletAPI(ctx context.Context, name string, dial PortDialer) error {
	cert, err := tls.LoadX509KeyPair(cp.pki.certFile, cp.pki.keyFile)
	if err != nil {
		return err
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
	if err != nil {
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	mux := http.NewServeMux()
	mux.HandleFunc("/portForward/{namespace}/{pod}", func(w http.ResponseWriter, r *http.Request) {
		ns, pod := r.PathValue("namespace"), r.PathValue("pod")
		portforward.ServePortForward(w, r, forwarder{ns, dial}, pod, "", nil, time.Minute, 30*time.Second, portforward.SupportedProtocols)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
	created, err := cp.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		srv.Close()
		return fmt.Errorf("node %s: %w", name, err)
	}
	created.Status = corev1.NodeStatus{
		// No Hostname address: the API server would try it first.
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
		Conditions:      []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), Reason: "KubeletReady"}},
	}
	if _, err := cp.Admin.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		srv.Close()
		return fmt.Errorf("node %s status: %w", name, err)
	}
	return nil
}

// forwarder copies a forwarded stream to and from a pod's port.
type forwarder struct {
	ns   string
	dial PortDialer
}

func (f forwarder) PortForward(ctx context.Context, name string, _ types.UID, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	c, err := f.dial(ctx, f.ns, name, port)
	if err != nil {
		return fmt.Errorf("pod %s/%s port %s: %w", f.ns, name, strconv.Itoa(int(port)), err)
	}
	defer c.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(c, stream); done <- struct{}{} }()
	go func() { io.Copy(stream, c); done <- struct{}{} }()
	<-done
	return nil
}
