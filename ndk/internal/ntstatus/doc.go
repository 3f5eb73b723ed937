// Package ntstatus holds the NTSTATUS numbers that ndkxdp uses, as untyped
// constants, so the engine under ndk/internal can fill completion statuses
// without importing package ndk (which imports the engine).
//
// It is not the public API: package ndk gives these numbers the type
// ndk.Status, names them and turns them into errors. Values come from
// mingw-w64 ntstatus.h and ndis.h (NDKPI.md §7).
//
// Example:
//
//	entry.Status = ntstatus.Cancelled // a flushed request
package ntstatus
