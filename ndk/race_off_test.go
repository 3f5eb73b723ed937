//go:build !race

package ndk

const raceDetector = false
