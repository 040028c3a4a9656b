(* tests/alloc/plain.ml — an OCaml program that does not link the flamme
   library, for `flamme record --alloc` on an unmodified binary. *)
let () =
  let l = ref [] in
  for i = 1 to 3_000_000 do
    l := [ i ];
    ignore (Sys.opaque_identity !l)
  done
