#!/bin/sh
# gen.sh captures the listings in this directory from the real conntrack
# tool (conntrack-tools 1.4.7 on Linux 6.18 when they were last made). It
# creates a network namespace, fills its conntrack table with conntrack -I,
# and saves what `conntrack -L` prints in each output format, what
# /proc/net/nf_conntrack holds, and `conntrack -L -o save` of the same table
# as the reference the tests compare every other format with. Run it as root
# from this directory, then rewrite the golden files:
#
#	sh gen.sh && go test .. -run TestGolden -update
set -eu

ns=gwt-ct-text-$$
ip netns add "$ns"
trap 'ip netns del "$ns"' EXIT INT TERM

ct() { ip netns exec "$ns" conntrack "$@"; }
add() {
	if ! out=$(ct -I "$@" 2>&1); then
		echo "conntrack -I $*: $out" >&2
		exit 1
	fi
}
sysctl_ns() { ip netns exec "$ns" sysctl -q -w "$@"; }

# The settings of a new namespace, spelled out: no timestamps, no counters.
sysctl_ns net.netfilter.nf_conntrack_timestamp=0 net.netfilter.nf_conntrack_acct=0

T=3600 # long enough for every capture to see every flow

# IPv4. A ClusterIP flow, DNATed to a pod, established and assured.
add -p tcp -s 10.244.1.50 -d 10.96.100.50 --sport 45678 --dport 5432 \
	-r 10.244.3.47 -q 10.244.1.50 --reply-port-src 5432 --reply-port-dst 45678 \
	--state ESTABLISHED -u SEEN_REPLY,ASSURED -t 431999
# DNATed to another port, kube-proxy's masquerade mark, zone 3, unreplied.
add -p tcp -s 10.244.1.50 -d 10.96.0.20 --sport 41000 --dport 80 \
	-r 10.244.2.8 -q 10.244.1.50 --reply-port-src 8080 --reply-port-dst 41000 \
	--state SYN_SENT -m 0x4000/0xffffffff -w 3 -t $T
# DNS over UDP to the cluster DNS Service, unreplied.
add -p udp -s 10.244.1.50 -d 10.96.0.10 --sport 53000 --dport 53 \
	-r 10.244.0.5 -q 10.244.1.50 --reply-port-src 53 --reply-port-dst 53000 -t $T
# UDP, replied, not translated.
add -p udp -s 10.244.1.50 -d 8.8.8.8 --sport 40000 --dport 53 -u SEEN_REPLY -t $T
# A NodePort flow: DNAT and SNAT, the largest mark.
add -p tcp -s 192.168.1.10 -d 172.18.0.2 --sport 40000 --dport 30080 \
	-r 10.244.2.9 -q 10.244.0.1 --reply-port-src 8080 --reply-port-dst 40000 \
	--state ESTABLISHED -u SEEN_REPLY,ASSURED -m 0xffffffff/0xffffffff -t $T
# SCTP, DNATed.
add -p sctp -s 10.244.1.50 -d 10.96.7.7 --sport 3868 --dport 3868 \
	-r 10.244.4.4 -q 10.244.1.50 --reply-port-src 3869 --reply-port-dst 3868 \
	--state ESTABLISHED --orig-vtag 1 --reply-vtag 2 -u SEEN_REPLY,ASSURED -t $T
# ICMP echo: type, code and id instead of ports.
add -p icmp -s 10.244.1.50 -d 10.244.2.2 --icmp-type 8 --icmp-code 0 --icmp-id 4242 -t $T
# TCP states.
add -p tcp -s 10.244.1.50 -d 10.244.2.2 --sport 50000 --dport 80 --state TIME_WAIT -u SEEN_REPLY,ASSURED -t $T
add -p tcp -s 10.244.1.50 -d 10.244.2.2 --sport 50001 --dport 80 --state LISTEN -t $T
add -p tcp -s 10.244.1.50 -d 10.244.2.2 --sport 50002 --dport 80 --state CLOSE_WAIT -u SEEN_REPLY -t $T
# Zones of one direction.
add -p tcp -s 10.244.1.50 -d 10.244.2.2 --sport 50003 --dport 80 --state SYN_SENT --orig-zone 5 -t $T
add -p tcp -s 10.244.1.50 -d 10.244.2.2 --sport 50004 --dport 80 --state SYN_SENT --reply-zone 6 -t $T
# Other protocols.
add -p gre -s 10.244.1.50 -d 10.244.2.2 --srckey 0x1234 --dstkey 0xffff -t $T
add -p udplite -s 10.244.1.50 -d 10.244.2.2 --sport 7 --dport 9 -t $T
add -p dccp -s 10.244.1.50 -d 10.244.2.2 --sport 7 --dport 9 --state OPEN --role client -t $T

# IPv6, compressed and not.
add -p tcp -s fd00:10:244:1::32 -d fd00:10:96::64 --sport 45678 --dport 443 \
	-r fd00:10:244:3::2f -q fd00:10:244:1::32 --reply-port-src 8443 --reply-port-dst 45678 \
	--state ESTABLISHED -u SEEN_REPLY,ASSURED -t $T
add -p udp -s fd00:10:244:1::32 -d fd00:10:96::a --sport 53001 --dport 53 \
	-r fd00:10:244::5 -q fd00:10:244:1::32 --reply-port-src 53 --reply-port-dst 53001 -t $T
add -p icmpv6 -s 2001:db8:1:2:3:4:5:6 -d 2001:db8::2 --icmpv6-type 128 --icmpv6-code 0 --icmpv6-id 9 -t $T
add -p sctp -s fd00:10:244:1::32 -d fd00:10:96::7 --sport 3868 --dport 3868 \
	-r fd00:10:244:4::4 -q fd00:10:244:1::32 --reply-port-src 3868 --reply-port-dst 3868 \
	--state COOKIE_WAIT --orig-vtag 3 --reply-vtag 4 -t $T
add -p tcp -s ::ffff:10.0.0.1 -d fd00::2 --sport 3 --dport 2 --state ESTABLISHED \
	-u SEEN_REPLY -m 1/0xffffffff -w 65535 -t $T
add -p tcp -s fe80::1 -d fe80::2 --sport 1 --dport 65535 --state FIN_WAIT -u SEEN_REPLY -t $T

# With timestamps (delta-time=) and counters (packets= bytes=), which the
# kernel attaches to the entries created while they are on.
sysctl_ns net.netfilter.nf_conntrack_timestamp=1 net.netfilter.nf_conntrack_acct=1
add -p tcp -s 10.244.5.5 -d 10.96.100.50 --sport 33333 --dport 5432 \
	-r 10.244.3.47 -q 10.244.5.5 --reply-port-src 5432 --reply-port-dst 33333 \
	--state ESTABLISHED -u SEEN_REPLY,ASSURED -t $T
add -p udp -s fd00:10:244:5::5 -d fd00:10:96::a --sport 53002 --dport 53 \
	-r fd00:10:244::5 -q fd00:10:244:5::5 --reply-port-src 53 --reply-port-dst 53002 -u SEEN_REPLY -t $T
sleep 3 # delta-time > 0

# The captures, stdout only unless the name says 2>&1.
ct -L -o save >listing-save.txt 2>/dev/null
ct -L >listing.txt 2>/dev/null
ct -L -o extended >listing-extended.txt 2>/dev/null
ct -L -o id >listing-id.txt 2>/dev/null
ct -L -o extended,id >listing-extended-id.txt 2>/dev/null
ct -L -o timestamp >listing-timestamp.txt 2>/dev/null
ct -L -o extended,id,ktimestamp >listing-ktimestamp.txt 2>/dev/null
ip netns exec "$ns" cat /proc/net/nf_conntrack >proc-nf_conntrack.txt
# A short listing with stderr: the trailer comes first, as stdout is only
# flushed at exit.
ct -L -f ipv6 -o extended >listing-ipv6-2and1.txt 2>&1

# A listing longer than stdio's buffer, with stderr: the trailer lands
# wherever stdout's last flush left off, usually in the middle of a line.
i=0
while [ $i -lt 60 ]; do
	add -p udp -s 10.9.0.$i -d 10.96.0.10 --sport 1053 --dport 53 \
		-r 10.244.0.5 -q 10.9.0.$i --reply-port-src 53 --reply-port-dst 1053 -t $T
	i=$((i + 1))
done
ct -L -o save >listing-long-save.txt 2>/dev/null
ct -L -o id >listing-long-2and1.txt 2>&1
