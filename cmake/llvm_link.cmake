# einc_llvm: the LLVM libraries einc_codegen links (an INTERFACE target),
# included by the top-level CMakeLists.txt after find_package(LLVM).
#
# With EINC_LLVM_STATIC (on by default), LLVM's static component libraries
# when they are installed (llvm-19-dev ships them and their imported
# targets) with what they link in turn (zlib, zstd, z3): einc then starts
# without the dynamic loader relocating all of libLLVM.so, 341,000 relative
# relocations and ~55 ms of CPU in every compile (docs/performance.md,
# section 4), and the executable holds only the components codegen calls.
# Otherwise the shared libLLVM-19 (Debian builds LLVM with
# LLVM_LINK_LLVM_DYLIB).  EINC_LLVM_LINKED_STATIC says which was chosen.

add_library(einc_llvm INTERFACE)
set(EINC_LLVM_LINKED_STATIC OFF)

# A libFuzzer build compiles with clang's sanitizers; the C++ link driver
# (g++ by default) would bring gcc's sanitizer runtime instead.
if(EINC_LLVM_STATIC AND NOT EINC_FUZZ)
  # What codegen calls: the IR and its verifier, the pass pipeline
  # (LLVMRunPasses), the target machine and object emission, the x86 back
  # end, and the module linker (LLVMLinkModules2, emit.c).
  llvm_map_components_to_libnames(einc_llvm_libs
    core analysis passes target linker x86codegen x86desc x86info)
  set(einc_llvm_missing "")
  foreach(lib IN LISTS einc_llvm_libs)
    if(NOT TARGET ${lib} OR NOT EXISTS "${LLVM_LIBRARY_DIR}/lib${lib}.a")
      list(APPEND einc_llvm_missing "${LLVM_LIBRARY_DIR}/lib${lib}.a")
    endif()
  endforeach()
  # LLVMSupport's own dependencies: targets (ZLIB::ZLIB, zstd::libzstd_shared
  # exist only when LLVMConfig.cmake found zlib1g-dev and libzstd-dev) and
  # absolute paths (libz3.so).
  if(TARGET LLVMSupport)
    get_target_property(einc_llvm_support_deps LLVMSupport INTERFACE_LINK_LIBRARIES)
    foreach(dep IN LISTS einc_llvm_support_deps)
      if((dep MATCHES "::" AND NOT TARGET ${dep}) OR (IS_ABSOLUTE "${dep}" AND NOT EXISTS "${dep}"))
        list(APPEND einc_llvm_missing "${dep}")
      endif()
    endforeach()
  endif()
  if(einc_llvm_missing)
    message(STATUS "einc: linking the shared libLLVM; static LLVM lacks: ${einc_llvm_missing}")
  else()
    # LLVM's archives are C++: the C++ driver links them with its runtime.
    enable_language(CXX)
    target_link_libraries(einc_llvm INTERFACE ${einc_llvm_libs})
    set(EINC_LLVM_LINKED_STATIC ON)
    message(STATUS "einc: linking LLVM's static component libraries")
  endif()
endif()
if(NOT EINC_LLVM_LINKED_STATIC)
  target_link_libraries(einc_llvm INTERFACE LLVM)
endif()
