module github.com/ndkxdp/ndkxdp

go 1.26.0

require golang.org/x/sys v0.49.0

require (
	github.com/cilium/ebpf v0.22.0
	github.com/vishvananda/netlink v1.3.1
	github.com/vishvananda/netns v0.0.5
)

tool github.com/cilium/ebpf/cmd/bpf2go
