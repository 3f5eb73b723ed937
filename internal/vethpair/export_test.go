package vethpair

// NetnsDir is where the external tests look for the namespaces NewPair
// bind-mounts.
const NetnsDir = netnsDir
