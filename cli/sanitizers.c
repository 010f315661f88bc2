/* The sanitizers' configuration of the dlcheck executable, read by the
 * runtime when it is built with them (the asan preset); a plain build
 * never calls it. In the binary rather than in LSAN_OPTIONS, so that it
 * holds wherever the sanitized dlcheck runs (a user's CI, not only ctest).
 *
 * HDF5's own leaks on damaged files: HDF5 1.10.8 loses the object header
 * its metadata cache was loading when the header's checksum fails
 * (H5Gopen2 or H5Dopen2 -> H5O_protect -> H5C_protect, 424 bytes), which
 * a damaged golden re-sealed by hand reaches (test_reliability.sh). That
 * is memory HDF5 allocated and lost, not dlcheck's: HDF5's exit handler
 * runs before LeakSanitizer's and frees everything HDF5 still owns, every
 * id left open included; dlcheck never takes ownership of memory HDF5
 * allocates (it reads no variable-length data, refusing such types before
 * reading, and calls none of the functions that return memory to free:
 * H5Tget_member_name, H5Tget_tag, H5Pget_class_name and the like), and
 * the one callback it gives HDF5 (H5Ewalk2's, engine/io/h5.c) allocates
 * nothing. So a leak allocated inside HDF5 is HDF5's.
 *
 * The suppression names HDF5's library, not its functions: the library
 * has no frame pointers, so with the fast unwinder LeakSanitizer's stack
 * ends at the first frame inside it ("libhdf5_serial.so.103+0x1233e4"),
 * and naming functions would need unwinding at every malloc (28% slower
 * runs under ASan, measured on `run --pitfalls grad_accum gpt_accum`). The
 * fuzz targets do unwind fully and suppress by function (fuzz/targets.c). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libhdf5\n"; }
