package calico

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Where Calico's CNI plugin and calico-node keep their files on a node.
const (
	// ConfFile is the Calico CNI configuration the kubelet's runtime reads.
	ConfFile = "/etc/cni/net.d/10-calico.conflist"
	// NodenameFile is the node name calico-node writes at its start; the
	// CNI plugin books under it when its configuration names no node.
	NodenameFile = "/var/lib/calico/nodename"
	// confKubeconfig is where the configuration names the plugin's
	// kubeconfig.
	confKubeconfig = "/etc/cni/net.d/calico-kubeconfig"
)

// nodeConf is the node's CNI configuration: install-cni's template
// (cni-plugin/pkg/install) without "nodename", so that the plugin takes
// the node name from NodenameFile, as on the nodes of calico#12257.
// install-cni itself writes the node's own name into "nodename"; a stale
// copy of that configuration is the other way to book under another name.
const nodeConf = `{
  "name": "k8s-pod-network",
  "cniVersion": "0.3.1",
  "plugins": [
    {
      "type": "calico",
      "log_level": "info",
      "log_file_path": "/var/log/calico/cni/cni.log",
      "datastore_type": "kubernetes",
      "mtu": 1500,
      "ipam": {"type": "calico-ipam"},
      "policy": {"type": "k8s"},
      "kubernetes": {"kubeconfig": "` + confKubeconfig + `"}
    },
    {
      "type": "portmap",
      "snat": true,
      "capabilities": {"portMappings": true}
    }
  ]
}
`

// Node is a Kubernetes node as Calico's CNI plugin sees it: its Node
// object, and its files under Root, the node's / : the CNI configuration
// (ConfFile) and the node name file calico-node writes (NodenameFile).
type Node struct {
	Name string
	Root string
	c    *Cluster
}

// AddNode registers a Node with the hostname label Calico's pool
// selectors read, and writes its files under the cluster's Dir as
// calico-node and install-cni write them: the node's own name in its
// nodename file.
func (c *Cluster) AddNode(ctx context.Context, name string) (*Node, error) {
	n := &Node{Name: name, Root: filepath.Join(c.Dir, "nodes", name), c: c}
	kubeconfig, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	for file, content := range map[string][]byte{
		ConfFile:       []byte(nodeConf),
		confKubeconfig: kubeconfig,
		NodenameFile:   []byte(name),
	} {
		if err := n.write(file, content); err != nil {
			return nil, err
		}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
	if _, err := c.cp.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	return n, nil
}

// Path is where the node's file (an absolute path on the node) is here.
func (n *Node) Path(file string) string { return filepath.Join(n.Root, filepath.FromSlash(file)) }

func (n *Node) write(file string, content []byte) error {
	p := n.Path(file)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, content, 0o644)
}

// SetNodename writes name into the node's nodename file, as calico-node
// does at its start, and as a node re-imaged from another node's disk
// keeps it until then.
func (n *Node) SetNodename(name string) error { return n.write(NodenameFile, []byte(name)) }

// Nodename is what the node's nodename file holds.
func (n *Node) Nodename() (string, error) {
	b, err := os.ReadFile(n.Path(NodenameFile))
	return string(b), err
}

// IPAMRequest is one pod sandbox's CNI request, as the container runtime
// makes it.
type IPAMRequest struct {
	// Namespace and Pod name the pod (K8S_POD_NAMESPACE, K8S_POD_NAME).
	Namespace, Pod string
	// ContainerID is the sandbox's ID (CNI_CONTAINERID).
	ContainerID string
}

// HandleID is the IPAM handle the plugin books r's allocation under.
func (r IPAMRequest) HandleID() string { return NetworkName + "." + r.ContainerID }

// AssignIP runs calico-ipam's ADD for r on the node, as the calico plugin
// delegates it: with the node's CNI configuration on stdin and CNI_* as
// the runtime sets them. The plugin books the address under the node name
// the configuration names, else the one in the node's nodename file, and
// picks it from the blocks of that node's pools (claiming a block for
// that node when none has room). The plugin's own log goes to the error
// when it fails.
func (n *Node) AssignIP(ctx context.Context, r IPAMRequest) (netip.Addr, error) {
	out, err := n.ipam(ctx, "ADD", r)
	if err != nil {
		return netip.Addr{}, err
	}
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return netip.Addr{}, fmt.Errorf("calico-ipam result %q: %w", out, err)
	}
	if len(res.IPs) != 1 {
		return netip.Addr{}, fmt.Errorf("calico-ipam result %q: want one address", out)
	}
	p, err := netip.ParsePrefix(res.IPs[0].Address)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("calico-ipam result %q: %w", out, err)
	}
	return p.Addr(), nil
}

// ReleaseIP runs calico-ipam's DEL for r on the node, as the runtime does
// when it removes the sandbox: the plugin releases what r's handle holds.
func (n *Node) ReleaseIP(ctx context.Context, r IPAMRequest) error {
	_, err := n.ipam(ctx, "DEL", r)
	return err
}

// ipam runs calico-ipam with command for r.
func (n *Node) ipam(ctx context.Context, command string, r IPAMRequest) ([]byte, error) {
	conf, err := n.pluginConf()
	if err != nil {
		return nil, err
	}
	args := "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + r.Namespace + ";K8S_POD_NAME=" + r.Pod +
		";K8S_POD_INFRA_CONTAINER_ID=" + r.ContainerID
	return n.c.run(ctx, []string{
		"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + r.ContainerID, "CNI_IFNAME=eth0",
		// The IPAM plugin never enters the sandbox; the path only has to be set.
		"CNI_NETNS=/var/run/netns/cni-" + r.ContainerID, "CNI_PATH=" + n.c.bin, "CNI_ARGS=" + args,
	}, conf, "calico-ipam")
}

// pluginConf is the calico plugin's entry of the node's CNI configuration,
// read at each call as the runtime reads it, with the list's name and
// version, as the runtime hands it to the plugin. The node's paths in it
// (and the defaults of those it leaves out) are moved under Root.
func (n *Node) pluginConf() ([]byte, error) {
	b, err := os.ReadFile(n.Path(ConfFile))
	if err != nil {
		return nil, err
	}
	var list struct {
		Name       string           `json:"name"`
		CNIVersion string           `json:"cniVersion"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("%s of node %s: %w", ConfFile, n.Name, err)
	}
	for _, p := range list.Plugins {
		if p["type"] != "calico" {
			continue
		}
		p["name"], p["cniVersion"] = list.Name, list.CNIVersion
		for key, def := range map[string]string{
			"nodename_file":  NodenameFile,
			"ipam_lock_file": "/var/run/calico/ipam.lock",
			"log_file_path":  "/var/log/calico/cni/cni.log",
		} {
			v, _ := p[key].(string)
			if v == "" {
				v = def
			}
			p[key] = n.Path(v)
		}
		if k, ok := p["kubernetes"].(map[string]any); ok {
			if v, _ := k["kubeconfig"].(string); v != "" {
				k["kubeconfig"] = n.Path(v)
			}
		}
		return json.Marshal(p)
	}
	return nil, fmt.Errorf("%s of node %s has no calico plugin", ConfFile, n.Name)
}

// Pod is a pod running on a node with the address calico-ipam gave its
// sandbox.
type Pod struct {
	Namespace, Name string
	UID             types.UID
	// Node is the node it runs on (spec.nodeName).
	Node string
	// BookedAs is the node name the plugin read when it booked the
	// address: the node's nodename file then.
	BookedAs string
	Request  IPAMRequest
	IP       netip.Addr
	// Started is when the CNI ADD returned.
	Started time.Time
}

// Ref is namespace/name.
func (p *Pod) Ref() string { return p.Namespace + "/" + p.Name }

// RunPod does what the scheduler and the kubelet do for a pod on the node:
// it creates the Pod bound to the node, runs the sandbox's CNI ADD (the
// sandbox's ID is derived from the pod's name, so that a run gives the
// same handles as the last), and reports the Pod Running and Ready with
// the address.
func (n *Node) RunPod(ctx context.Context, namespace, name string) (*Pod, error) {
	api := n.c.cp.Admin.CoreV1().Pods(namespace)
	created, err := api.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{NodeName: n.Name,
			Containers: []corev1.Container{{Name: "workload", Image: "lab"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	bookedAs, err := n.Nodename()
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(name))
	p := &Pod{Namespace: namespace, Name: name, UID: created.UID, Node: n.Name, BookedAs: bookedAs,
		Request: IPAMRequest{Namespace: namespace, Pod: name, ContainerID: hex.EncodeToString(sum[:])}}
	if p.IP, err = n.AssignIP(ctx, p.Request); err != nil {
		return nil, fmt.Errorf("pod %s on node %s: %w", p.Ref(), n.Name, err)
	}
	p.Started = time.Now()
	now := metav1.NewTime(p.Started)
	created.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, StartTime: &now,
		PodIP: p.IP.String(), PodIPs: []corev1.PodIP{{IP: p.IP.String()}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
	}
	if _, err := api.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return nil, err
	}
	return p, nil
}

// DeletePod does what deleting a pod does on the node: the Pod is marked
// for deletion, the kubelet removes the sandbox (calico-ipam's DEL
// releases its address) and then deletes the Pod for good.
func (n *Node) DeletePod(ctx context.Context, p *Pod) error {
	api := n.c.cp.Admin.CoreV1().Pods(p.Namespace)
	if err := api.Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	if err := n.ReleaseIP(ctx, p.Request); err != nil {
		return fmt.Errorf("pod %s on node %s: %w", p.Ref(), n.Name, err)
	}
	zero := int64(0)
	return api.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: metav1.NewUIDPreconditions(string(p.UID))})
}
