// Builds the Calico components the Calico IPAM tests run against the real
// control plane: calico-kube-controllers (kubernetes datastore), calicoctl
// and the calico-ipam CNI plugin, from Calico's monorepo module at the
// commit tagged v3.30.1. A module of its own so that none of this reaches
// ghostwatch's go.mod. scripts/calico-binaries.sh builds from it.
//
// The module proxy serves the monorepo only as pseudo-versions, and of
// those only some: v3.30.1 is the newest release whose commit it serves
// together with a matching github.com/projectcalico/api (the monorepo's
// api/ directory is a module of its own, left out of the monorepo's zip;
// the api repository's commit below holds the same pkg/ tree as v3.30.1's
// api/). lib/std is the other nested module the commands import. The
// k8s.io and lumberjack replacements are those of Calico's own go.mod.
//
// The checksum database answers 404 for these pseudo-versions, and for
// k8s.io/kubernetes v1.32.4 that go mod tidy reads for Calico's tests:
// go.sum pins what the proxy served, so builds need no lookup, but
// changing a version here needs GOSUMDB=off (or GONOSUMDB for the modules
// concerned) for go mod tidy.
module github.com/ghostwatch/ghostwatch/tools/calico

go 1.26.8

require github.com/projectcalico/calico v0.0.0-20250529224300-393b14e729a6 // v3.30.1

require (
	github.com/Microsoft/go-winio v0.6.2 // indirect
	github.com/Microsoft/hcsshim v0.12.9 // indirect
	github.com/alexflint/go-filemutex v1.3.0 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/blang/semver/v4 v4.0.0 // indirect
	github.com/buger/jsonparser v1.1.1 // indirect
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/containerd/cgroups/v3 v3.0.3 // indirect
	github.com/containerd/errdefs v1.0.0 // indirect
	github.com/containerd/errdefs/pkg v0.3.0 // indirect
	github.com/containerd/typeurl/v2 v2.2.2 // indirect
	github.com/containernetworking/cni v1.2.3 // indirect
	github.com/containernetworking/plugins v1.6.2 // indirect
	github.com/coreos/go-iptables v0.8.0 // indirect
	github.com/coreos/go-semver v0.3.1 // indirect
	github.com/coreos/go-systemd/v22 v22.5.0 // indirect
	github.com/davecgh/go-spew v1.1.2-0.20180830191138-d8f796af33cc // indirect
	github.com/docopt/docopt-go v0.0.0-20180111231733-ee0de3bc6815 // indirect
	github.com/ebitengine/purego v0.8.2 // indirect
	github.com/emicklei/go-restful/v3 v3.11.0 // indirect
	github.com/felixge/httpsnoop v1.0.4 // indirect
	github.com/fsnotify/fsnotify v1.8.0 // indirect
	github.com/fxamacker/cbor/v2 v2.7.0 // indirect
	github.com/go-ini/ini v1.67.0 // indirect
	github.com/go-logr/logr v1.4.2 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/go-ole/go-ole v1.2.6 // indirect
	github.com/go-openapi/jsonpointer v0.21.0 // indirect
	github.com/go-openapi/jsonreference v0.20.2 // indirect
	github.com/go-openapi/swag v0.23.0 // indirect
	github.com/go-playground/locales v0.14.1 // indirect
	github.com/go-playground/universal-translator v0.18.1 // indirect
	github.com/gofrs/flock v0.12.1 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/golang/groupcache v0.0.0-20210331224755-41bb18bfe9da // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/google/gnostic-models v0.6.8 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/google/gofuzz v1.2.0 // indirect
	github.com/google/safetext v0.0.0-20240722112252-5a72de7e7962 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/grpc-ecosystem/grpc-gateway/v2 v2.20.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/jinzhu/copier v0.4.0 // indirect
	github.com/joho/godotenv v1.5.1 // indirect
	github.com/josharian/intern v1.0.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/juju/clock v1.1.1 // indirect
	github.com/juju/errors v1.0.0 // indirect
	github.com/juju/mutex v0.0.0-20180619145857-d21b13acf4bf // indirect
	github.com/kardianos/osext v0.0.0-20190222173326-2bc1f35cddc0 // indirect
	github.com/kelseyhightower/envconfig v1.4.0 // indirect
	github.com/klauspost/compress v1.17.11 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/leodido/go-urn v1.4.0 // indirect
	github.com/lufia/plan9stats v0.0.0-20211012122336-39d0f177ccd0 // indirect
	github.com/mailru/easyjson v0.7.7 // indirect
	github.com/mattn/go-runewidth v0.0.16 // indirect
	github.com/mcuadros/go-version v0.0.0-20190830083331-035f6764e8d2 // indirect
	github.com/mipearson/rfw v0.0.0-20170619235010-6f0a6f3266ba // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/natefinch/atomic v1.0.1 // indirect
	github.com/olekukonko/tablewriter v0.0.5 // indirect
	github.com/patrickmn/go-cache v2.1.0+incompatible // indirect
	github.com/pborman/uuid v1.2.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/power-devops/perfstat v0.0.0-20210106213030-5aafc221ea8c // indirect
	github.com/projectcalico/api v0.0.0-20220722155641-439a754a988b // indirect
	github.com/projectcalico/calico/lib/std v0.0.0-00010101000000-000000000000 // indirect
	github.com/projectcalico/go-json v0.0.0-20161128004156-6219dc7339ba // indirect
	github.com/projectcalico/go-yaml-wrapper v0.0.0-20191112210931-090425220c54 // indirect
	github.com/prometheus/client_golang v1.21.1 // indirect
	github.com/prometheus/client_model v0.6.1 // indirect
	github.com/prometheus/common v0.63.0 // indirect
	github.com/prometheus/procfs v0.15.1 // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	github.com/safchain/ethtool v0.5.10 // indirect
	github.com/shirou/gopsutil/v4 v4.25.2 // indirect
	github.com/sirupsen/logrus v1.9.3 // indirect
	github.com/spf13/cobra v1.9.1 // indirect
	github.com/spf13/pflag v1.0.6 // indirect
	github.com/termie/go-shutil v0.0.0-20140729215957-bcacb06fecae // indirect
	github.com/tklauser/go-sysconf v0.3.12 // indirect
	github.com/tklauser/numcpus v0.6.1 // indirect
	github.com/vishvananda/netlink v1.3.1-0.20250206174618-62fb240731fa // indirect
	github.com/vishvananda/netns v0.0.4 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	github.com/yusufpapurcu/wmi v1.2.4 // indirect
	go.etcd.io/etcd/api/v3 v3.5.19 // indirect
	go.etcd.io/etcd/client/pkg/v3 v3.5.19 // indirect
	go.etcd.io/etcd/client/v3 v3.5.19 // indirect
	go.opencensus.io v0.24.0 // indirect
	go.opentelemetry.io/auto/sdk v1.1.0 // indirect
	go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp v0.54.0 // indirect
	go.opentelemetry.io/otel v1.34.0 // indirect
	go.opentelemetry.io/otel/exporters/otlp/otlptrace v1.28.0 // indirect
	go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc v1.27.0 // indirect
	go.opentelemetry.io/otel/metric v1.34.0 // indirect
	go.opentelemetry.io/otel/sdk v1.34.0 // indirect
	go.opentelemetry.io/otel/trace v1.34.0 // indirect
	go.opentelemetry.io/proto/otlp v1.3.1 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.27.0 // indirect
	golang.org/x/crypto v0.37.0 // indirect
	golang.org/x/net v0.39.0 // indirect
	golang.org/x/oauth2 v0.28.0 // indirect
	golang.org/x/sync v0.13.0 // indirect
	golang.org/x/sys v0.32.0 // indirect
	golang.org/x/term v0.31.0 // indirect
	golang.org/x/text v0.24.0 // indirect
	golang.org/x/time v0.11.0 // indirect
	golang.zx2c4.com/wireguard/wgctrl v0.0.0-20241231184526-a9ab2273dd10 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20250106144421-5f5ef82da422 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250313205543-e70fdf4c4cb4 // indirect
	google.golang.org/grpc v1.71.0 // indirect
	google.golang.org/protobuf v1.36.5 // indirect
	gopkg.in/evanphx/json-patch.v4 v4.12.0 // indirect
	gopkg.in/go-playground/assert.v1 v1.2.1 // indirect
	gopkg.in/go-playground/validator.v9 v9.30.2 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	gopkg.in/natefinch/lumberjack.v2 v2.2.1 // indirect
	gopkg.in/yaml.v2 v2.4.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
	k8s.io/api v0.32.4 // indirect
	k8s.io/apiextensions-apiserver v0.32.4 // indirect
	k8s.io/apimachinery v0.32.4 // indirect
	k8s.io/apiserver v0.32.4 // indirect
	k8s.io/client-go v0.32.4 // indirect
	k8s.io/component-base v0.32.4 // indirect
	k8s.io/klog/v2 v2.130.1 // indirect
	k8s.io/kube-openapi v0.0.0-20241105132330-32ad38e42d3f // indirect
	k8s.io/utils v0.0.0-20241104100929-3ea5e8cea738 // indirect
	sigs.k8s.io/json v0.0.0-20241010143419-9aa6b5e7a4b3 // indirect
	sigs.k8s.io/knftables v0.0.18 // indirect
	sigs.k8s.io/network-policy-api v0.1.5 // indirect
	sigs.k8s.io/structured-merge-diff/v4 v4.4.2 // indirect
	sigs.k8s.io/yaml v1.4.0 // indirect
)

replace (
	github.com/projectcalico/api => github.com/projectcalico/api v0.0.0-20250617202239-c3be7477438e // v3.30.1
	github.com/projectcalico/calico/lib/std => github.com/projectcalico/calico/lib/std v0.0.0-20250529224300-393b14e729a6 // v3.30.1

	gopkg.in/natefinch/lumberjack.v2 => gopkg.in/natefinch/lumberjack.v2 v2.0.0

	k8s.io/api => k8s.io/api v0.32.4
	k8s.io/apiextensions-apiserver => k8s.io/apiextensions-apiserver v0.32.4
	k8s.io/apimachinery => k8s.io/apimachinery v0.32.4
	k8s.io/apiserver => k8s.io/apiserver v0.32.4
	k8s.io/cli-runtime => k8s.io/cli-runtime v0.32.4
	k8s.io/client-go => k8s.io/client-go v0.32.4
	k8s.io/cloud-provider => k8s.io/cloud-provider v0.32.4
	k8s.io/cluster-bootstrap => k8s.io/cluster-bootstrap v0.32.4
	k8s.io/code-generator => k8s.io/code-generator v0.32.4
	k8s.io/component-base => k8s.io/component-base v0.32.4
	k8s.io/component-helpers => k8s.io/component-helpers v0.32.4
	k8s.io/controller-manager => k8s.io/controller-manager v0.32.4
	k8s.io/cri-api => k8s.io/cri-api v0.32.4
	k8s.io/csi-translation-lib => k8s.io/csi-translation-lib v0.32.4
	k8s.io/endpointslice => k8s.io/endpointslice v0.32.4
	k8s.io/externaljwt => k8s.io/externaljwt v0.32.4
	k8s.io/kube-aggregator => k8s.io/kube-aggregator v0.32.4
	k8s.io/kube-controller-manager => k8s.io/kube-controller-manager v0.32.4
	k8s.io/kube-proxy => k8s.io/kube-proxy v0.32.4
	k8s.io/kube-scheduler => k8s.io/kube-scheduler v0.32.4
	k8s.io/kubectl => k8s.io/kubectl v0.32.4
	k8s.io/kubelet => k8s.io/kubelet v0.32.4
	k8s.io/metrics => k8s.io/metrics v0.32.4
	k8s.io/mount-utils => k8s.io/mount-utils v0.32.4
	k8s.io/pod-security-admission => k8s.io/pod-security-admission v0.32.4
	k8s.io/sample-apiserver => k8s.io/sample-apiserver v0.32.4
)
