//go:build !race

package verbsd_test

const raceDetector = false
