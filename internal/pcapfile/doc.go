// Package pcapfile writes and reads classic libpcap capture files
// (https://www.tcpdump.org/manpages/pcap-savefile.5.html), so that ndkxdp can
// record the frames a port moves (`ndkxdp demo --capture FILE`) and tests can
// read real captures back.
//
// Writer produces nanosecond-resolution, little-endian files, which
// tcpdump, Wireshark and tshark read. Read and ReadFile accept the four
// classic variants (micro- or nanosecond, either byte order) and hold the
// whole file in memory.
//
// It is not a capture library: no pcapng, no filters, no live capture, no
// dissection.
//
// Example:
//
//	f, _ := os.Create("port.pcap")
//	w, err := pcapfile.NewWriter(f, 0, pcapfile.LinkTypeEthernet)
//	if err != nil { ... }
//	err = w.WritePacket(time.Now(), frame)
//
//	c, err := pcapfile.ReadFile("port.pcap")
//	for _, p := range c.Packets { ... p.Time, p.Data ... }
package pcapfile
