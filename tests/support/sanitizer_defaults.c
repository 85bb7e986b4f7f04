/* Sanitizer settings compiled into every test program, so that ctest, a
 * debugger and a plain run see the same ones. The sanitizer runtimes call
 * these hooks when they are linked in; otherwise they are unused. */

/* OOM tests ask for absurd sizes: allocation must fail, not abort. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1:detect_leaks=1"; }

const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) { return "print_stacktrace=1:halt_on_error=1"; }

/* Memory the CUDA libraries keep for the life of the process. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
  return "leak:libcuda.so\nleak:libnvrtc\nleak:libcublas\nleak:libnccl\n";
}
