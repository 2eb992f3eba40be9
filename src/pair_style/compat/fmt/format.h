/* compat/fmt/format.h: lets LAMMPS 2021 headers (which call fmt::make_args_checked) compile against the
 * system {fmt} >= 9, where that function was removed. Only on the include path for such a LAMMPS. */
#pragma once
#include_next <fmt/format.h>

#if FMT_VERSION >= 90000
namespace fmt {
template <typename... Args, typename S, typename Char = char>
inline auto make_args_checked(const S &, const remove_reference_t<Args> &...args)
    -> format_arg_store<buffer_context<Char>, remove_reference_t<Args>...> {
    return {args...};
}
}  // namespace fmt
#endif
