package loader

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ethtoolChannels is struct ethtool_channels (linux/ethtool.h).
type ethtoolChannels struct {
	Cmd                                         uint32
	MaxRx, MaxTx, MaxOther, MaxCombined         uint32
	RxCount, TxCount, OtherCount, CombinedCount uint32
}

// ifreqData is struct ifreq with ifr_data, padded to the union's size.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte
}

// RxQueues counts the receive queues of ifname that are in use: those RSS
// can put a frame on, and so those an AF_XDP socket must serve. Netlink's
// IFLA_NUM_RX_QUEUES is the count the driver allocated, which is often
// more (veth allocates one per CPU and uses one; mlx5 and virtio_net
// allocate their maximum), and binding a queue past the used ones fails
// with EINVAL. The used count comes from ETHTOOL_GCHANNELS (rx plus
// combined channels); a driver without get_channels has as many in use as
// it allocated. Both answer for the calling thread's network namespace.
func RxQueues(ifname string) (int, error) {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return 0, fmt.Errorf("interface %s: %w", ifname, err)
	}
	n, err := usedRxChannels(ifname)
	if err != nil {
		if !errors.Is(err, unix.EOPNOTSUPP) {
			return 0, fmt.Errorf("interface %s: ETHTOOL_GCHANNELS: %w", ifname, err)
		}
		n = l.Attrs().NumRxQueues
	}
	return max(n, 1), nil
}

func usedRxChannels(ifname string) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	if len(ifname) >= unix.IFNAMSIZ {
		return 0, unix.EINVAL
	}
	ch := ethtoolChannels{Cmd: unix.ETHTOOL_GCHANNELS}
	ifr := ifreqData{data: unsafe.Pointer(&ch)}
	copy(ifr.name[:], ifname)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); e != 0 {
		return 0, e
	}
	return int(ch.RxCount + ch.CombinedCount), nil
}
