# Sourced by the scripts that boot a test VM (verifier-kernels.sh,
# rxe-interop.sh). modules DIR NAME... copies the kernel modules NAME and
# their dependencies (modinfo's depends=), dependencies first, each once,
# decompressed, from the kernel's tree DIR into "$root/modules", and lists
# them in "$root/modules/order" for the VM's init to load. Needs $tmp and
# $root.
declare -A packed
modules() {
	local dir=$1 m f deps
	shift
	for m in "$@"; do
		m=${m//-/_}
		[ -n "${packed[$m]:-}" ] && continue
		packed[$m]=1
		f=$(find "$dir" -regextype posix-extended -regex ".*/${m//_/[-_]}\.ko(\.xz|\.zst|\.gz)?" | head -n1)
		if [ -z "$f" ]; then
			echo "$(basename "$0" .sh): module $m: not in the package (built in?), not loaded" >&2
			continue
		fi
		case $f in
		*.xz) xz -dc "$f" >"$tmp/$m.ko" ;;
		*.zst) zstd -qdc "$f" >"$tmp/$m.ko" ;;
		*.gz) gzip -dc "$f" >"$tmp/$m.ko" ;;
		*) cp "$f" "$tmp/$m.ko" ;;
		esac
		deps=$(tr '\0' '\n' <"$tmp/$m.ko" | sed -n 's/^depends=//p' | head -n1 | tr ',' ' ')
		[ -n "$deps" ] && modules "$dir" $deps
		mv "$tmp/$m.ko" "$root/modules/$m.ko"
		echo "$m.ko" >>"$root/modules/order"
	done
}
