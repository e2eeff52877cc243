//go:build race

package verbsd_test

// raceDetector: the race detector slows everything several times; the
// long transfers shrink under it (they ran full size without it).
const raceDetector = true
