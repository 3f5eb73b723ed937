package ndk

import "fmt"

// GUID names an NDK extension interface (NdkQueryExtension's
// InterfaceId), in the byte order of its textual form.
type GUID [16]byte

func (g GUID) String() string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", g[0:4], g[4:6], g[6:8], g[8:10], g[10:16])
}

// queryExtension answers NdkQueryExtension for every object: NDKPI defines
// no standard extension interface ("there are currently no standard
// extension interfaces defined", NDKPI.md §3), and ndkxdp offers its own
// (the atomics) as Go methods, so every interface id is
// STATUS_NOT_SUPPORTED. It never pends.
func queryExtension(object string, id GUID, v Version) (any, error) {
	return nil, errorf(StatusNotSupported, "query extension", "%s: no extension interface %v version %v", object, id, v)
}

// QueryExtension is NdkQueryExtension on the adapter: STATUS_NOT_SUPPORTED
// for every id (queryExtension says why).
func (a *Adapter) QueryExtension(id GUID, v Version) (any, error) {
	return queryExtension("adapter", id, v)
}

// QueryExtension is NdkQueryExtension on the CQ (STATUS_NOT_SUPPORTED).
func (c *CQ) QueryExtension(id GUID, v Version) (any, error) { return queryExtension("cq", id, v) }

// QueryExtension is NdkQueryExtension on the PD (STATUS_NOT_SUPPORTED).
func (pd *PD) QueryExtension(id GUID, v Version) (any, error) { return queryExtension("pd", id, v) }

// QueryExtension is NdkQueryExtension on the MR (STATUS_NOT_SUPPORTED).
func (m *MR) QueryExtension(id GUID, v Version) (any, error) { return queryExtension("mr", id, v) }

// QueryExtension is NdkQueryExtension on the QP (STATUS_NOT_SUPPORTED).
func (q *QP) QueryExtension(id GUID, v Version) (any, error) { return queryExtension("qp", id, v) }

// QueryExtension is NdkQueryExtension on the connector
// (STATUS_NOT_SUPPORTED).
func (c *Connector) QueryExtension(id GUID, v Version) (any, error) {
	return queryExtension("connector", id, v)
}

// QueryExtension is NdkQueryExtension on the listener
// (STATUS_NOT_SUPPORTED).
func (x *Listener) QueryExtension(id GUID, v Version) (any, error) {
	return queryExtension("listener", id, v)
}

// QueryExtension is NdkQueryExtension on the shared endpoint
// (STATUS_NOT_SUPPORTED).
func (x *SharedEndpoint) QueryExtension(id GUID, v Version) (any, error) {
	return queryExtension("shared endpoint", id, v)
}
